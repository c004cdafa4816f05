/**
 * Conformance of the two compare-and-set methods sagas and wallets rely on (DocumentStore.updateIf/replaceIf):
 * PgStore on the local server (skipped with a message when it does not answer). The concurrency case is the wallet's: many conditional decrements
 * race, none overdraws.
 */
import { rmSync } from "fs";
import { PgStore, type DocumentStore, type StoredDoc } from "../../stores";
import { settle, stampOf, type Image, type SettleDeps } from "../../engine/saga-staging";
import { sha256Hex } from "../../lib/crypto";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { tempDir } from "../helpers/platform";
import { unique } from "../helpers/samples";

const dir = tempDir("sagas-store-");
const impls: Array<{ name: string; make(): DocumentStore; unavailable?(): boolean }> = [];

let pg: TestDatabase | undefined;
let pgChecked = false;
impls.push({ name: "PgStore", make: () => new PgStore({ dataDir: dir, databaseUrl: pg!.url }, `sagas_${unique()}`), unavailable: () => pgChecked && !pg });
beforeAll(async () => {
	pg = await testDatabase();
	pgChecked = true;
}, 30_000);

afterAll(async () => {
	rmSync(dir, { recursive: true, force: true });
	await pg?.drop();
});

for (const impl of impls) {
	describe(impl.name, () => {
		let store: DocumentStore;
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
			await store.insert({ id: "a".repeat(24), balance: 100, ops: [], state: "AWAITING", note: "x", deleted_at: null });
		});

		test("updateIf applies the update only when the condition matches, and returns the document after", async () => {
			const id = "a".repeat(24);
			expect(await store.updateIf({ id, balance: { $gte: 150 } }, { $inc: { balance: -150 } })).toBeNull();
			const after = await store.updateIf({ id, balance: { $gte: 60 } }, { $inc: { balance: -60 }, $push: { ops: "s1:0" } });
			expect(after).toMatchObject({ id, balance: 40, ops: ["s1:0"] });
			expect(await store.updateIf({ id, ops: "s1:0" }, { $inc: { balance: 60 }, $pull: { ops: "s1:0" } })).toMatchObject({ balance: 100, ops: [] });
			// The op id is gone: the same undo a second time matches nothing.
			expect(await store.updateIf({ id, ops: "s1:0" }, { $inc: { balance: 60 }, $pull: { ops: "s1:0" } })).toBeNull();
			expect(await store.findOne({ id })).toMatchObject({ balance: 100 });
			expect(await store.updateIf({ id, state: "AWAITING" }, { $set: { state: "COMMITTED" } })).toMatchObject({ state: "COMMITTED" });
			expect(await store.updateIf({ id, state: "AWAITING" }, { $set: { state: "ABORTED" } })).toBeNull();
		});

		test("concurrent conditional decrements never overdraw: 30 × 10 from 100 → exactly 10 succeed", async () => {
			const id = "a".repeat(24);
			const results = await Promise.all(Array.from({ length: 30 }, () => store.updateIf({ id, balance: { $gte: 10 } }, { $inc: { balance: -10 } })));
			expect(results.filter(Boolean)).toHaveLength(10);
			expect(await store.findOne({ id })).toMatchObject({ balance: 0 });
		});

		test("concurrent increments lose none (PostgreSQL: compare-and-set races, then row locks), conditions checked on the row written", async () => {
			const id = "a".repeat(24);
			const results = await Promise.all(Array.from({ length: 40 }, (_, i) => store.updateIf({ id, note: { $regex: /^x/ } }, { $inc: { balance: 1 }, $push: { ops: `op${i}` } })));
			expect(results.every(Boolean)).toBe(true);
			const doc = await store.findOne({ id });
			expect(doc).toMatchObject({ balance: 140 });
			expect([...(doc!.ops as string[])].sort()).toEqual(Array.from({ length: 40 }, (_, i) => `op${i}`).sort());
			// Each returned document is the one written: the balances handed out are exactly 101..140.
			expect(results.map((r) => r!.balance).sort((a, b) => Number(a) - Number(b))).toEqual(Array.from({ length: 40 }, (_, i) => 101 + i));
			// A document deleted meanwhile: null, nothing written.
			await store.removeMany({ id });
			expect(await store.updateIf({ id }, { $inc: { balance: 1 } })).toBeNull();
			expect(await store.count({})).toBe(0);
		});

		test("replaceIf replaces the whole document (fields not in the image go) only when the condition matches", async () => {
			const id = "a".repeat(24);
			expect(await store.replaceIf({ id, note: "y" }, { id, balance: 1, deleted_at: null })).toBe(false);
			expect(await store.replaceIf({ id, note: "x" }, { id, balance: 1, deleted_at: null })).toBe(true);
			const doc = await store.findOne({ id });
			expect(doc).toEqual({ id, balance: 1, deleted_at: null });
		});

		test("a stage recorded by a version whose documents held `_id` is undone: destroy, update, insert", async () => {
			const changes: string[] = [];
			const d: SettleDeps = { store, record: async (c) => void changes.push(...c.map((x) => x.op)) };
			const earlier = ({ id, ...rest }: StoredDoc) => ({ ...rest, _id: id }) as unknown as StoredDoc;
			const digest = (doc: Record<string, unknown>) =>
				sha256Hex(
					JSON.stringify(
						Object.fromEntries(
							Object.keys(doc)
								.sort()
								.map((k) => [k, doc[k]]),
						),
					),
				);
			const gone: StoredDoc = { id: "b".repeat(24), note: "gone", deleted_at: null, updated_at: "2026-01-01T00:00:00.000Z" };
			const id = "a".repeat(24);
			const cur = (await store.findOne({ id }))!;
			const set = { note: "y", updated_at: "2026-01-02T00:00:00.000Z" };
			await store.setOne(id, set);
			const made: StoredDoc = { id: "c".repeat(24), note: "made", deleted_at: null, updated_at: "2026-01-03T00:00:00.000Z" };
			await store.insert({ ...made });
			const images: Image[] = [
				{ kind: "destroy", id: gone.id, before: earlier(gone) },
				{ kind: "update", id, before: earlier(cur), after: stampOf({ ...cur, ...set }), set },
				{ kind: "insert", id: made.id, after: stampOf(made), digest: digest(earlier(made)) },
			];
			expect(await settle(d, images, "abort")).toEqual(["undone", "undone", "undone"]);
			expect(await store.findOne({ id: gone.id })).toEqual(gone);
			expect(await store.findOne({ id })).toEqual(cur);
			expect(await store.findOne({ id: made.id })).toBeNull();
			expect(changes.sort()).toEqual(["c", "d", "u"]);
			expect(await store.count({ _id: { $exists: true } })).toBe(0);
		});
	});
}
