/** The newest change records a gateway's live cursors keep in memory (services/api/live-cursor.ts), for resumption. */
import type { OutboxRecord } from "../../events/outbox";

/** Records kept in memory for resumption (Last-Event-ID) on this gateway; older positions are read from the outbox. */
export const LIVE_RING = 20_000;

/** The records after `floor` up to `position`, in seq order: every one of them is here. */
export class LiveRing {
	private records: OutboxRecord[] = [];
	/** Every record after this is in memory. */
	floor = 0;
	/** The last record the feed read (and dispatched). */
	position = 0;

	/** Empty, starting at `head`. */
	startAt(head: number): void {
		this.position = this.floor = head;
	}

	/** Whether every record after `seq` is in memory. */
	holds(seq: number): boolean {
		return seq >= this.floor && seq <= this.position;
	}

	/** The first `max` records after `seq`. */
	after(seq: number, max: number): OutboxRecord[] {
		let lo = 0;
		let hi = this.records.length;
		while (lo < hi) {
			const mid = (lo + hi) >>> 1;
			if (this.records[mid].seq <= seq) lo = mid + 1;
			else hi = mid;
		}
		return this.records.slice(lo, lo + max);
	}

	push(rec: OutboxRecord): void {
		this.records.push(rec);
	}

	/** Past LIVE_RING records, the older half goes; the new floor, or undefined when nothing went. */
	trim(): number | undefined {
		if (this.records.length <= LIVE_RING) return undefined;
		const cut = this.records.length - LIVE_RING / 2;
		this.floor = this.records[cut - 1].seq;
		this.records = this.records.slice(cut);
		return this.floor;
	}
}
