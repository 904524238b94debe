// `IpDenyList`, as the peer exports it: a namespace of the IP list's functions.
export { disableIpDenyList, ThresholdError, updateIpDenyList } from "./deny-list.js";
