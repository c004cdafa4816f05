/**
 * runtime/seed-once.ts on PgStore (a database of its own on the local server; skipped with a message when it does not
 * answer): the claim logic is the store's unique `id`. Of concurrent callers one runs the job; a claim whose holder stopped beating is taken over; a failed job frees the
 * claim; a job found done before claims existed is not run again.
 */
import { rmSync } from "fs";
import { PgStore } from "../../stores";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { unique } from "../helpers/samples";
import { runOnce } from "../../runtime/seed-once";
import { tempDir } from "../helpers/platform";

let dir: string;
let store: PgStore;
let pg: TestDatabase | undefined;

beforeAll(async () => {
	pg = await testDatabase();
}, 30_000);
afterAll(() => pg?.drop());

beforeEach(async () => {
	dir = tempDir();
	store = new PgStore({ dataDir: dir, databaseUrl: pg?.url }, `_seed_${unique()}`);
	if (pg) await store.connect();
});

afterEach(async () => {
	if (pg) await store.disconnect();
	rmSync(dir, { recursive: true, force: true });
});

/** Each case needs the server (testDatabase printed why when it does not answer). */
const test = (name: string, fn: () => Promise<void>, ms?: number) => global.test(name, async () => (pg ? fn() : undefined), ms);

const never = async () => false;

test("of five concurrent callers exactly one runs the job; the others wait for it and learn who ran it", async () => {
	let runs = 0;
	const job = async () => {
		runs++;
		await new Promise((r) => setTimeout(r, 300));
	};
	const results = await Promise.all(["n1", "n2", "n3", "n4", "n5"].map((holder) => runOnce(store, "root", { holder }, never, job)));
	expect(runs).toBe(1);
	const winner = ["n1", "n2", "n3", "n4", "n5"][results.findIndex((r) => r.ran)];
	expect(results.filter((r) => r.ran)).toHaveLength(1);
	for (const r of results.filter((x) => !x.ran)) expect(r).toEqual({ ran: false, by: winner });
	expect(await store.findOne({ id: "root" })).toMatchObject({ state: "done", holder: winner, by: winner });
	// A later start finds it done and runs nothing.
	expect(await runOnce(store, "root", { holder: "late" }, never, job)).toEqual({ ran: false, by: winner });
	expect(runs).toBe(1);
});

test("a claim whose holder stopped beating is taken over and the job runs once more", async () => {
	await store.insert({ id: "root", state: "running", holder: "dead", beat: Date.now() - 60_000 });
	let runs = 0;
	const r = await runOnce(store, "root", { holder: "n2", staleMs: 1000 }, never, async () => void runs++);
	expect(r).toEqual({ ran: true });
	expect(runs).toBe(1);
	expect(await store.findOne({ id: "root" })).toMatchObject({ state: "done", by: "n2" });
});

test("a live claim is not taken over: a waiter gives up with the holder's name when its wait runs out", async () => {
	await store.insert({ id: "root", state: "running", holder: "busy", beat: Date.now() });
	await expect(runOnce(store, "root", { holder: "n2", waitMs: 400 }, never, async () => undefined)).rejects.toThrow(
		"root: still claimed by busy after waiting; restart this node once that one is up",
	);
});

test("a failed job frees the claim at once, so the next caller runs it", async () => {
	await expect(runOnce(store, "root", { holder: "n1" }, never, async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
	expect(await store.findOne({ id: "root" })).toBeNull();
	expect(await runOnce(store, "root", { holder: "n2" }, never, async () => undefined)).toEqual({ ran: true });
});

test("a job already done before claims existed is recorded as done without running", async () => {
	let runs = 0;
	const r = await runOnce(
		store,
		"root",
		{ holder: "n1" },
		async () => true,
		async () => void runs++,
	);
	expect(r).toEqual({ ran: false, by: "an earlier start" });
	expect(runs).toBe(0);
	expect(await runOnce(store, "root", { holder: "n2" }, never, async () => void runs++)).toEqual({ ran: false, by: "an earlier start" });
	expect(runs).toBe(0);
});

test("the holder keeps beating while a long job runs, so nobody takes it over", async () => {
	let runs = 0;
	const slow = async () => {
		runs++;
		await new Promise((r) => setTimeout(r, 800));
	};
	const opts = { beatMs: 50, staleMs: 300 };
	const [a, b] = await Promise.all([
		runOnce(store, "root", { holder: "n1", ...opts }, never, slow),
		new Promise((r) => setTimeout(r, 50)).then(() => runOnce(store, "root", { holder: "n2", ...opts }, never, slow)),
	]);
	expect(runs).toBe(1);
	expect([a, b]).toEqual([{ ran: true }, { ran: false, by: "n1" }]);
});

test("a takeover gets the dead holder's claim with what it noted; the noted fields stay on the claim", async () => {
	await store.insert({ id: "root", state: "running", holder: "dead", beat: Date.now() - 60_000, client_id: "c1" });
	let seen: unknown;
	await runOnce(store, "root", { holder: "n2", staleMs: 1000 }, never, async (h) => {
		seen = h.previous;
		await h.note({ client_id: "c2" });
	});
	expect(seen).toMatchObject({ id: "root", holder: "dead", client_id: "c1" });
	expect(await store.findOne({ id: "root" })).toMatchObject({ state: "done", by: "n2", client_id: "c2" });
});
