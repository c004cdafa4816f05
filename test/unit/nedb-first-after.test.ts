/**
 * `firstAfter` (mixins/stores/nedb.store.ts): the next documents after a position, read from the field's index. The
 * change stream's groups read their batches through it when they trail the outbox's memory tail; it must give exactly
 * what a `$gt` find sorted by the field and limited gives, whatever the tree's shape, gaps and removals.
 */
import { NedbStore } from "../../mixins/stores/nedb.store";

test("the same documents, in the same order, as a sorted and limited $gt find; without an index: undefined", async () => {
	const store = new NedbStore(undefined, ["seq"]);
	await store.connect();
	// Microsecond-like positions with gaps, inserted in bulks and one by one.
	const seqs: number[] = [];
	let s = 1_700_000_000_000_000;
	for (let i = 0; i < 3000; i++) seqs.push((s += 1 + (i % 7 === 0 ? 1000 : 0)));
	for (let i = 0; i < 2000; i += 500) await store.insertMany(seqs.slice(i, i + 500).map((q) => ({ _id: `r${q}`, seq: q, body: { q } })));
	for (const q of seqs.slice(2000)) await store.insert({ _id: `r${q}`, seq: q, body: { q } });
	// Pruned records (the oldest), and a few in the middle.
	await store.removeMany({ seq: { $lte: seqs[99] } });
	await store.removeMany({ _id: { $in: [seqs[1500], seqs[1501], seqs[2999]].map((q) => `r${q}`) } });

	const probes = [0, seqs[0], seqs[99], seqs[100], seqs[1499], seqs[1500], seqs[1777], seqs[2997], seqs[2998], seqs[2999], Number.MAX_SAFE_INTEGER];
	for (const after of probes)
		for (const limit of [1, 7, 100, 5000]) {
			const expected = await store.find({ query: { seq: { $gt: after } }, sort: { seq: 1 }, limit });
			const got = store.firstAfter("seq", after, limit)!;
			expect(got.map((d) => d.seq)).toEqual(expected.map((d) => d.seq));
			expect(got).toEqual(expected);
		}
	// Copies: a reader that changes what it got changes nothing stored.
	const [first] = store.firstAfter("seq", 0, 1)!;
	(first.body as { q: number }).q = -1;
	expect(((await store.find({ query: { _id: first._id } }))[0].body as { q: number }).q).toBe(first.seq);
	expect(store.firstAfter("nope", 0, 10)).toBeUndefined();
	expect(store.firstAfter("seq", 0, 0)).toEqual([]);
	await store.disconnect();
});

test("the platform's own stores (`_outbox`...) have only their own indexes, also when their file was written with the collection ones", async () => {
	const { mkdtempSync, writeFileSync, rmSync } = await import("fs");
	const os = await import("os");
	const path = await import("path");
	const dir = mkdtempSync(path.join(os.tmpdir(), "nedb-internal-"));
	try {
		const file = path.join(dir, "_outbox.db");
		// What an earlier version wrote: the collection indexes persisted in the data file.
		writeFileSync(file, ['{"$$indexCreated":{"fieldName":"owner"}}', '{"$$indexCreated":{"fieldName":"deleted_at"}}', '{"_id":"a","seq":1}'].join("\n") + "\n");
		const store = new NedbStore(file, ["seq"]);
		await store.connect();
		expect(Object.keys((store as any).db.indexes).sort()).toEqual(["_id", "seq"]);
		expect(store.firstAfter("seq", 0, 10)!.map((d) => d._id)).toEqual(["a"]);
		await store.disconnect();
		const notes = new NedbStore(path.join(dir, "content", "notes.db"));
		await notes.connect();
		expect(Object.keys((notes as any).db.indexes)).toEqual(expect.arrayContaining(["_id", "owner", "clients", "deleted_at"]));
		await notes.disconnect();
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
});
