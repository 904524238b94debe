// The decisions a refund can give units back from. edgelimit gives units back by settling a decision
// below what it took (into the window it was counted in), so a negative `rate` settles the admitted
// decisions of this instance for the identifier, newest first. Bounded: the identifiers seen last,
// a few decisions each.

import type { Decision, Limiter } from "../../index.js";

/** Decisions held per identifier: a refund reaches at most this far back. */
const PER_IDENTIFIER = 16;

interface Held {
  readonly owner: Limiter;
  readonly decision: Decision;
  /** The units it took. */
  readonly cost: number;
}

/** What a refund gives back: `decision`, whole (settled to 0), then `rest` units charged again. */
export interface Giveback {
  readonly owner: Limiter;
  readonly decision: Decision;
  readonly rest: number;
}

export class Ledger {
  private readonly entries = new Map<string, Held[]>();

  constructor(private readonly maxIdentifiers: number) {}

  /** Holds an admitted decision of `cost` units, for a later refund. */
  hold(identifier: string, owner: Limiter, decision: Decision, cost: number): void {
    const held = this.entries.get(identifier) ?? [];
    this.entries.delete(identifier);
    held.push({ owner, decision, cost });
    if (held.length > PER_IDENTIFIER) held.shift();
    this.entries.set(identifier, held);
    if (this.entries.size > this.maxIdentifiers) this.entries.delete(this.entries.keys().next().value!);
  }

  /** The settles that give back up to `units` of `identifier`'s, newest decision first. */
  take(identifier: string, units: number): Giveback[] {
    const held = this.entries.get(identifier);
    const out: Giveback[] = [];
    while (held !== undefined && held.length > 0 && units > 0) {
      const { owner, decision, cost } = held.pop()!;
      const back = Math.min(units, cost);
      units -= back;
      out.push({ owner, decision, rest: cost - back });
    }
    if (held !== undefined && held.length === 0) this.entries.delete(identifier);
    return out;
  }

  forget(identifier: string): void {
    this.entries.delete(identifier);
  }
}
