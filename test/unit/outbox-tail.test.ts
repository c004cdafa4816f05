/** The embedded outbox's in-memory tail (events/outbox-tail.ts): what it serves, and when it sends readers to the store. */
import { OutboxTail } from "../../events/outbox-tail";
import type { OutboxRecord } from "../../events/outbox";

const rec = (seq: number) => ({ seq, event: { id: String(seq) }, clients: [], actor: {} }) as unknown as OutboxRecord;
const seqs = (r: OutboxRecord[] | undefined) => r?.map((x) => x.seq);

test("serves the records after a position at or past its floor; older positions go to the store", () => {
	const t = new OutboxTail(100);
	t.add([rec(101), rec(102), rec(103)]);
	t.add([rec(104)]);
	expect(seqs(t.readFrom(100, 10))).toEqual([101, 102, 103, 104]);
	expect(seqs(t.readFrom(102, 1))).toEqual([103]);
	expect(seqs(t.readFrom(104, 10))).toEqual([]);
	// Before the floor: records the tail never held (stored before it started).
	expect(t.readFrom(99, 10)).toBeUndefined();
});

test("dropping raises the floor: pruned records are read (and missed) as the store has them", () => {
	const t = new OutboxTail(0);
	t.add([1, 2, 3, 4, 5].map(rec));
	t.drop(3);
	expect(t.readFrom(2, 10)).toBeUndefined();
	expect(seqs(t.readFrom(3, 10))).toEqual([4, 5]);
});

test("keeps a bounded number of records, and gives up on records out of order", () => {
	const t = new OutboxTail(0);
	t.add(Array.from({ length: 5001 }, (_, i) => rec(i + 1)));
	expect(t.readFrom(0, 1)).toBeUndefined();
	expect(seqs(t.readFrom(5000, 10))).toEqual([5001]);
	const u = new OutboxTail(0);
	u.add([rec(2), rec(1)]);
	expect(u.readFrom(0, 10)).toBeUndefined();
});
