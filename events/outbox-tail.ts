/**
 * The newest records of an embedded (NeDB) outbox, kept in memory by the process that appends them, so that the
 * consumer groups read their batches from here instead of the store: a store read selects every record after the
 * position, sorts them and deep-copies the page twice (its read cache), once per group, and that grew with the
 * backlog. Only for a store one process writes (NeDB): every record after `floor` was appended here, in seq order.
 * Records are shared by the groups that read them: consumers treat them as read-only (none changes a record).
 */
import type { OutboxRecord } from "./outbox";

/** Most records kept (about 1.5 KB each for a 1 KB document); older ones are read from the store. */
const MAX = 5000;

export class OutboxTail {
	private recs: OutboxRecord[] = [];
	/** Every record with a larger seq is in `recs`. */
	private floor: number;
	private broken = false;

	constructor(storedUpTo: number) {
		this.floor = storedUpTo;
	}

	/** Records just stored, in the order their inserts completed (NeDB runs inserts in call order: seq order). */
	add(recs: OutboxRecord[]): void {
		for (const r of recs) {
			const last = this.recs.length ? this.recs[this.recs.length - 1].seq : this.floor;
			// Out of order would mean a reader could pass a record not yet here: serve nothing from memory any more.
			if (r.seq <= last) this.broken = true;
			this.recs.push(r);
		}
		if (this.recs.length > MAX) this.drop(this.recs[this.recs.length - MAX / 2 - 1].seq);
	}

	/** Forgets the records up to `seq` (pruned from the store, or too old to keep). */
	drop(seq: number): void {
		if (seq <= this.floor) return;
		this.recs = this.recs.slice(this.after(seq));
		this.floor = seq;
	}

	/** Up to `limit` records after `after`, or undefined when the memory does not reach back that far. */
	readFrom(after: number, limit: number): OutboxRecord[] | undefined {
		if (this.broken || after < this.floor) return undefined;
		const from = this.after(after);
		return this.recs.slice(from, from + limit);
	}

	/** Index of the first record with seq > `seq` (binary search: seqs only grow). */
	private after(seq: number): number {
		let lo = 0;
		let hi = this.recs.length;
		while (lo < hi) {
			const mid = (lo + hi) >>> 1;
			if (this.recs[mid].seq <= seq) lo = mid + 1;
			else hi = mid;
		}
		return lo;
	}
}
