/**
 * The conformance suite of the DocumentStore contract (catalog/store.ts): what the collection engine relies on, on
 * PgStore (a database of its own on the local server; skipped with a message when it does not answer, a failure
 * under REQUIRE_SERVERS=1).
 */
import { rmSync } from "fs";
import { isDuplicateKeyError, pageOf, PgStore, type DocumentStore, type FindOptions, type StoredDoc } from "../../stores";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { tempDir } from "../helpers/platform";
import { hexId, unique } from "../helpers/samples";

interface Impl {
	name: string;
	make(): DocumentStore;
	cleanup?(): void;
	/** True when the implementation's server does not answer (requireServer printed why). */
	unavailable?(): boolean;
}

const dir = tempDir("store-conformance-");
const impls: Impl[] = [];

let pg: TestDatabase | undefined;
let pgChecked = false;
impls.push({
	name: "PgStore",
	make: () => new PgStore({ dataDir: dir, databaseUrl: pg!.url }, `conformance_${unique()}`, ["seq"]),
	unavailable: () => pgChecked && !pg,
});
beforeAll(async () => {
	pg = await testDatabase();
	pgChecked = true;
}, 30_000);

afterAll(async () => {
	rmSync(dir, { recursive: true, force: true });
	await pg?.drop();
});

/** Ten documents shaped like the engine's: ids in creation order, deleted_at always present. */
function fixtures(): StoredDoc[] {
	return Array.from({ length: 10 }, (_, n) => ({
		id: hexId(n),
		n,
		group: n % 3,
		name: `doc-${n}`,
		title: n % 2 === 0 ? `Even ${n}` : `odd ${n}`,
		tags: n % 2 === 0 ? ["even", "all"] : ["odd", "all"],
		lines: [{ sku: `sku-${n}`, qty: n }],
		props: { n, deep: { flag: n > 6 } },
		...(n === 9 ? {} : { extra: `x${n}` }),
		deleted_at: n >= 8 ? "2024-01-01T00:00:00.000Z" : null,
	}));
}

const ns = (docs: StoredDoc[]) => docs.map((d) => d.n);

for (const impl of impls) {
	describe(impl.name, () => {
		let store: DocumentStore;
		let docs: StoredDoc[];
		const off = () => !!impl.unavailable?.();
		const test = (name: string, fn: () => Promise<void>) => it(name, async () => (off() ? undefined : fn()));

		beforeAll(async () => {
			if (off()) return;
			store = impl.make();
			await store.connect();
		});
		afterAll(async () => {
			if (off()) return;
			await store.removeMany({});
			await store.disconnect();
		});
		beforeEach(async () => {
			if (off()) return;
			await store.removeMany({});
			docs = fixtures();
			expect(await store.insertMany(docs.map((d) => ({ ...d })))).toHaveLength(10);
		});

		test("ping", async () => {
			expect(await store.ping()).toBe(true);
		});

		test("insert returns the document; find and findOne return it with `id`, never `_id`", async () => {
			const doc = { id: hexId(99), n: 99, name: "single", deleted_at: null };
			expect(await store.insert({ ...doc })).toMatchObject(doc);
			const found = await store.findOne({ id: doc.id });
			expect(found).toEqual(doc);
			expect(found).not.toHaveProperty("_id");
			expect(await store.findOne({ id: doc.id })).toEqual(doc);
			const [listed] = await store.find({ query: { id: doc.id } });
			expect(listed).toEqual(doc);
			expect(await store.findOne({ id: hexId(123) })).toBeNull();
			expect(await store.count({})).toBe(11);
		});

		test("find with query, sort, skip and limit", async () => {
			expect(ns(await store.find({ query: {} }))).toHaveLength(10);
			expect(ns(await store.find({ query: { group: 1 }, sort: { n: 1 } }))).toEqual([1, 4, 7]);
			expect(ns(await store.find({ query: {}, sort: { n: -1 }, skip: 2, limit: 3 }))).toEqual([7, 6, 5]);
			expect(ns(await store.find({ query: { group: { $in: [0, 2] } }, sort: { group: 1, n: -1 } }))).toEqual([9, 6, 3, 0, 8, 5, 2]);
			expect(ns(await store.find({ query: {}, sort: { id: 1 }, limit: 4 }))).toEqual([0, 1, 2, 3]);
			expect(ns(await store.find({ query: {}, sort: { id: -1 }, limit: 2 }))).toEqual([9, 8]);
			expect(ns(await store.find({ query: {}, sort: { "props.n": -1 }, skip: 9 }))).toEqual([0]);
			expect(await store.find({ query: {}, sort: { n: 1 }, skip: 20 })).toEqual([]);
		});

		test("a page and its total (a list): find's page and count's total of the same query, in one pass where the store can", async () => {
			const cases: FindOptions[] = [
				{ query: {}, sort: { n: -1 }, skip: 2, limit: 3 },
				{ query: { deleted_at: null, tags: "odd" }, sort: { n: 1 }, limit: 2 },
				{ query: { group: { $in: [0, 2] } }, sort: { group: 1, n: -1 }, skip: 1, limit: 4 },
				// Missing values sort first ascending, last descending; ties by id.
				{ query: {}, sort: { extra: -1 }, limit: 3 },
				{ query: { n: { $gte: 5 } }, sort: { id: -1 }, skip: 1 },
				// Evaluated outside SQL on PostgreSQL ($regex, $elemMatch).
				{ query: { title: { $regex: /^even/i }, lines: { $elemMatch: { qty: { $gt: 1 } } } }, sort: { n: -1 }, limit: 2 },
				{ query: { name: "nope" }, sort: { n: 1 }, limit: 5 },
				{ query: {}, sort: { n: 1 }, skip: 20, limit: 5 },
				{ query: { group: 1 }, sort: { n: 1 }, limit: 2, projection: { name: 1 } },
			];
			for (const o of cases) {
				const page = await pageOf(store, o);
				expect({ o, page }).toEqual({ o, page: { docs: await store.find(o), total: await store.count(o.query) } });
			}
			expect(ns((await pageOf(store, cases[0])).docs)).toEqual([7, 6, 5]);
			expect(await pageOf(store, cases[1])).toEqual({ docs: [docs[1], docs[3]], total: 4 });
			expect(ns((await pageOf(store, cases[3])).docs)).toEqual([8, 7, 6]);
			expect(await pageOf(store, cases[5])).toEqual({ docs: [docs[8], docs[6]], total: 4 });
			expect(await pageOf(store, cases[7])).toEqual({ docs: [], total: 10 });
			expect((await pageOf(store, cases[8])).docs).toEqual([
				{ id: docs[1].id, name: "doc-1" },
				{ id: docs[4].id, name: "doc-4" },
			]);
		});

		test("projection: inclusion keeps `id`; `id` maps to `id`; exclusion drops fields", async () => {
			const [inc] = await store.find({ query: { n: 3 }, projection: { name: 1, "props.n": 1 } });
			expect(inc).toEqual({ id: docs[3].id, name: "doc-3", props: { n: 3 } });
			const [noId] = await store.find({ query: { n: 3 }, projection: { name: 1, id: 0 } });
			expect(noId).toEqual({ name: "doc-3" });
			const [exc] = await store.find({ query: { n: 3 }, projection: { lines: 0, props: 0, tags: 0 } });
			expect(exc).toEqual({ id: docs[3].id, n: 3, group: 0, name: "doc-3", title: "odd 3", extra: "x3", deleted_at: null });
		});

		test("`id` maps to `id` at the top level, in $in, and inside $or / $and", async () => {
			const [a, b, c] = [docs[1].id, docs[4].id, docs[7].id];
			expect(ns(await store.find({ query: { id: a } }))).toEqual([1]);
			expect(ns(await store.find({ query: { id: { $in: [a, b, c] } }, sort: { n: 1 } }))).toEqual([1, 4, 7]);
			expect(ns(await store.find({ query: { id: { $nin: [a, b] }, group: 1 } }))).toEqual([7]);
			expect(ns(await store.find({ query: { $or: [{ id: a }, { n: 5 }] }, sort: { n: 1 } }))).toEqual([1, 5]);
			expect(ns(await store.find({ query: { $and: [{ id: { $in: [a, b, c] } }, { n: { $gt: 1 } }] }, sort: { n: 1 } }))).toEqual([4, 7]);
			expect(ns(await store.find({ query: { $and: [{ $or: [{ id: a }, { id: c }] }, { group: 1 }] }, sort: { n: 1 } }))).toEqual([1, 7]);
			expect(await store.count({ id: { $gt: docs[6].id } })).toBe(3);
		});

		test("findOne and count with queries", async () => {
			expect((await store.findOne({ name: "doc-4" }))?.id).toBe(docs[4].id);
			expect(await store.findOne({ name: "nope" })).toBeNull();
			expect(await store.count({})).toBe(10);
			expect(await store.count({ group: 0 })).toBe(4);
			expect(await store.count({ n: { $gte: 3, $lt: 6 } })).toBe(3);
			expect(await store.count({ name: "nope" })).toBe(0);
		});

		test("`{ deleted_at: null }` matches live documents only", async () => {
			expect(ns(await store.find({ query: { deleted_at: null }, sort: { n: 1 } }))).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
			expect(await store.count({ deleted_at: { $ne: null } })).toBe(2);
			expect(await store.count({ $and: [{ deleted_at: null }, { group: 2 }] })).toBe(2);
		});

		test("operators: comparison, $in/$nin, $regex (RegExp), $or, $and, $exists, $elemMatch, $ne, $size, dotted paths", async () => {
			const q = async (query: Record<string, unknown>) => ns(await store.find({ query, sort: { n: 1 } }));
			expect(await q({ n: { $gt: 7 } })).toEqual([8, 9]);
			expect(await q({ n: { $lte: 1 } })).toEqual([0, 1]);
			expect(await q({ n: { $ne: 0 }, group: 0 })).toEqual([3, 6, 9]);
			expect(await q({ tags: { $in: ["odd"] }, n: { $lt: 5 } })).toEqual([1, 3]);
			expect(await q({ tags: "even", n: { $nin: [0, 2, 4] } })).toEqual([6, 8]);
			expect(await q({ title: { $regex: /^even/i } })).toEqual([0, 2, 4, 6, 8]);
			expect(await q({ title: { $regex: /^odd [13]$/ } })).toEqual([1, 3]);
			expect(await q({ $or: [{ n: 0 }, { group: 2, tags: "odd" }] })).toEqual([0, 5]);
			expect(await q({ $and: [{ tags: "all" }, { n: { $gte: 8 } }] })).toEqual([8, 9]);
			expect(await q({ extra: { $exists: false } })).toEqual([9]);
			expect(await q({ extra: { $exists: true }, n: { $gt: 6 } })).toEqual([7, 8]);
			expect(await q({ lines: { $elemMatch: { sku: "sku-3", qty: { $gte: 3 } } } })).toEqual([3]);
			expect(await q({ lines: { $elemMatch: { qty: { $gt: 8 } } } })).toEqual([9]);
			expect(await q({ tags: { $size: 2 }, n: 0 })).toEqual([0]);
			expect(await q({ "props.deep.flag": true })).toEqual([7, 8, 9]);
			expect(await q({ "props.n": { $in: [2, 3] } })).toEqual([2, 3]);
		});

		test("$elemMatch of operators tests each element as a value; a sub-document element never passes (the embedded matcher threw on one)", async () => {
			const q = async (query: Record<string, unknown>) => ns(await store.find({ query, sort: { n: 1 } }));
			expect(await q({ tags: { $elemMatch: { $in: ["odd"] } }, n: { $lt: 5 } })).toEqual([1, 3]);
			expect(await q({ tags: { $elemMatch: { $gte: "even", $lt: "evf" } } })).toEqual([0, 2, 4, 6, 8]);
			expect(await q({ tags: { $elemMatch: { $regex: /^OD/i } } })).toEqual([1, 3, 5, 7, 9]);
			expect(await q({ tags: { $elemMatch: { $in: [] } } })).toEqual([]);
			// Sub-documents and a field that is no array: no match, no error.
			expect(await q({ lines: { $elemMatch: { $gt: 0 } } })).toEqual([]);
			expect(await q({ lines: { $elemMatch: { $in: ["sku-1", 1] } } })).toEqual([]);
			expect(await q({ n: { $elemMatch: { $gte: 0 } } })).toEqual([]);
			expect(await store.count({ $or: [{ lines: { $elemMatch: { $regex: /sku/ } } }, { tags: { $elemMatch: { $in: ["even"] } }, group: 0 }] })).toBe(2);
			expect(await store.removeMany({ tags: { $elemMatch: { $in: ["odd"] } }, lines: { $elemMatch: { qty: 9 } } })).toBe(1);
			expect(await store.count({ tags: { $elemMatch: { $gt: "n" } } })).toBe(4);
		});

		test("setOne returns the document as stored afterwards, or null", async () => {
			const after = await store.setOne(docs[2].id, { name: "renamed", "props.n": 20, updated_at: "2024-02-02T00:00:00.000Z" });
			expect(after).toEqual({ ...docs[2], name: "renamed", props: { n: 20, deep: { flag: false } }, updated_at: "2024-02-02T00:00:00.000Z" });
			expect(await store.findOne({ id: docs[2].id })).toEqual(after);
			expect(await store.setOne(hexId(77), { name: "ghost" })).toBeNull();
			expect(await store.count({ name: "ghost" })).toBe(0);
			// Setting null keeps the key (a restore clears deleted_at this way).
			const restored = await store.setOne(docs[8].id, { deleted_at: null });
			expect(restored?.deleted_at).toBeNull();
			expect(await store.count({ deleted_at: null })).toBe(9);
		});

		test("setOne of top-level fields: existing keys changed, new ones added, values as given", async () => {
			const id = docs[3].id;
			const after = await store.setOne(id, { title: "changed", added: { b: [1, { c: null }], a: "x" }, name: null, second: true });
			const expected = { ...docs[3], title: "changed", name: null, added: { b: [1, { c: null }], a: "x" }, second: true };
			// Equal as documents: the store returns jsonb's key order, not the order written (docs/decisions.md).
			expect(after).toStrictEqual(expected);
			expect(await store.findOne({ id })).toStrictEqual(expected);
			expect(await store.count({ added: { $exists: true } })).toBe(1);
			expect(await store.setOne(hexId(66), { title: "ghost" })).toBeNull();
			expect(await store.count({ title: "ghost" })).toBe(0);
		});

		test("setMany changes the listed documents and returns how many", async () => {
			const ids = [docs[0].id, docs[3].id, docs[5].id];
			expect(await store.setMany(ids, { status: "bulk" })).toBe(3);
			expect(ns(await store.find({ query: { status: "bulk" }, sort: { n: 1 } }))).toEqual([0, 3, 5]);
			expect(await store.setMany([hexId(55)], { status: "none" })).toBe(0);
			expect(await store.count({ status: "none" })).toBe(0);
		});

		test("removeMany removes what matches and returns how many", async () => {
			expect(await store.removeMany({ group: 1 })).toBe(3);
			expect(await store.count({})).toBe(7);
			expect(await store.removeMany({ id: docs[0].id })).toBe(1);
			expect(await store.findOne({ id: docs[0].id })).toBeNull();
			expect(await store.removeMany({ name: "nope" })).toBe(0);
			expect(await store.removeMany({})).toBe(6);
			expect(await store.count({})).toBe(0);
		});

		test("the unique sparse `tenant_ref` index: many without one, one per value; violations are isDuplicateKeyError", async () => {
			// `ref` is unique per tenant: the engine keeps `tenant_ref` (`<tenant>:<ref>`), which the stores index uniquely.
			const fresh = (n: number, ref?: string): StoredDoc => ({ id: hexId(200 + n), n: 200 + n, deleted_at: null, ...(ref !== undefined ? { tenant_ref: ref } : {}) });
			// The ten fixtures have no ref: the index is sparse.
			await store.insert(fresh(1, "alpha"));
			await store.insert(fresh(2));
			const dup = await store.insert(fresh(3, "alpha")).then(
				() => null,
				(e) => e,
			);
			expect(dup).not.toBeNull();
			expect(isDuplicateKeyError(dup)).toBe(true);
			const dupMany = await store.insertMany([fresh(4, "beta"), fresh(5, "beta")]).then(
				() => null,
				(e) => e,
			);
			expect(isDuplicateKeyError(dupMany)).toBe(true);
			const dupSet = await store.setOne(docs[0].id, { tenant_ref: "alpha" }).then(
				() => null,
				(e) => e,
			);
			expect(isDuplicateKeyError(dupSet)).toBe(true);
			expect(await store.count({ tenant_ref: "alpha" })).toBe(1);
			expect((await store.findOne({ id: docs[0].id }))?.tenant_ref).toBeUndefined();
			// `ref` itself repeats (two tenants may use the same one).
			await store.insert({ id: hexId(210), deleted_at: null, ref: "same", tenant_ref: "t1:same" });
			await store.insert({ id: hexId(211), deleted_at: null, ref: "same", tenant_ref: "t2:same" });
			expect(await store.count({ ref: "same" })).toBe(2);
			// Same `id` twice is a duplicate as well.
			const dupId = await store.insert({ ...docs[1] }).then(
				() => null,
				(e) => e,
			);
			expect(isDuplicateKeyError(dupId)).toBe(true);
			expect(isDuplicateKeyError(new Error("other"))).toBe(false);
			expect(isDuplicateKeyError(undefined)).toBe(false);
		});

		test("setting `ref` to null clears it: any number of documents can drop their ref", async () => {
			await store.setOne(docs[0].id, { ref: "r0" });
			await store.setOne(docs[1].id, { ref: "r1" });
			const cleared = await store.setOne(docs[0].id, { ref: null, name: "no ref" });
			expect(cleared).not.toHaveProperty("ref");
			expect(cleared?.name).toBe("no ref");
			expect(await store.setOne(docs[1].id, { ref: null })).not.toHaveProperty("ref");
			expect(await store.setOne(docs[2].id, { ref: null })).not.toHaveProperty("ref");
			expect(await store.setMany([docs[3].id, docs[4].id], { ref: null, status: "x" })).toBe(2);
			expect(await store.count({ ref: { $exists: true } })).toBe(0);
			// The same for the derived `tenant_ref`.
			await store.setOne(docs[6].id, { ref: "r6", tenant_ref: "t:r6" });
			expect(await store.setOne(docs[6].id, { ref: null, tenant_ref: null })).not.toHaveProperty("tenant_ref");
			await store.setOne(docs[7].id, { ref: "r7", tenant_ref: "t:r7" });
			expect(await store.setOne(docs[7].id, { ref: null, tenant_ref: null })).not.toHaveProperty("tenant_ref");
			// The freed value can be taken again.
			expect((await store.setOne(docs[5].id, { ref: "r0" }))?.ref).toBe("r0");
		});

		test("reads after a write see the write; returned documents are copies", async () => {
			const query = { group: 1 };
			expect(await store.count(query)).toBe(3);
			const before = await store.find({ query, sort: { n: 1 } });
			before[0].name = "mutated by the caller";
			(before[0].tags as string[]).push("mutated");
			expect((await store.find({ query, sort: { n: 1 } }))[0]).toEqual(docs[1]);
			await store.insert({ id: hexId(500), n: 500, group: 1, deleted_at: null });
			expect(await store.count(query)).toBe(4);
			expect(ns(await store.find({ query, sort: { n: 1 } }))).toEqual([1, 4, 7, 500]);
			await store.setOne(docs[1].id, { group: 2 });
			expect(await store.count(query)).toBe(3);
			expect((await store.findOne({ id: docs[1].id }))?.group).toBe(2);
			await store.setMany([docs[4].id], { group: 2 });
			expect(ns(await store.find({ query, sort: { n: 1 } }))).toEqual([7, 500]);
			await store.removeMany({ n: 7 });
			expect(await store.count(query)).toBe(1);
			expect(await store.findOne({ n: 7 })).toBeNull();
			await store.insertMany([{ id: hexId(501), n: 501, group: 1, deleted_at: null }]);
			expect(ns(await store.find({ query, sort: { n: 1 } }))).toEqual([500, 501]);
		});
	});
}
