/**
 * A find by one `_id` on the embedded store (mixins/stores/nedb.store.ts) skips the read cache: it must still give
 * what NeDB's own cursor gives for the same query (the other conditions matched, skip and limit applied), copies
 * that a reader may change, and a write's effect at once.
 */
import { NedbStore } from "../../mixins/stores/nedb.store";

test("a find by _id: the full query matched, skip and limit, copies, every write seen", async () => {
	const store = new NedbStore(undefined);
	await store.connect();
	await store.insertMany([
		{ _id: "a", owner: "u1", deleted_at: null, body: { n: 1 } },
		{ _id: "b", owner: "u2", deleted_at: null, body: { n: 2 } },
	]);
	const ids = async (query: Record<string, unknown>, o: { skip?: number; limit?: number } = {}) => (await store.find({ query, ...o })).map((d) => d._id);
	expect(await ids({ _id: "a" })).toEqual(["a"]);
	expect(await ids({ _id: "a", owner: "u1", deleted_at: null })).toEqual(["a"]);
	// Another condition that fails: nothing, although the id exists.
	expect(await ids({ _id: "a", owner: "u2" })).toEqual([]);
	expect(await ids({ _id: "a", $or: [{ owner: "u9" }, { shares: "u2" }] })).toEqual([]);
	expect(await ids({ _id: "nope" })).toEqual([]);
	expect(await ids({ _id: "a" }, { skip: 1 })).toEqual([]);
	expect(await ids({ _id: "a" }, { limit: 1 })).toEqual(["a"]);
	expect(await store.findOne({ _id: "b", "body.n": 2 })).toMatchObject({ _id: "b", owner: "u2" });
	expect(await store.findOne({ _id: "b", "body.n": { $gt: 2 } })).toBeNull();

	// A copy: changing what was read changes nothing stored.
	const [got] = await store.find({ query: { _id: "a" } });
	(got.body as { n: number }).n = 99;
	expect(((await store.findOne({ _id: "a" }))!.body as { n: number }).n).toBe(1);

	// Writes are seen by the next read (no cached answer in between).
	await store.setOne("a", { owner: "u3" });
	expect(await ids({ _id: "a", owner: "u1" })).toEqual([]);
	expect(await ids({ _id: "a", owner: "u3" })).toEqual(["a"]);
	await store.removeMany({ _id: { $in: ["a"] } });
	expect(await ids({ _id: "a" })).toEqual([]);
	await store.disconnect();
});
