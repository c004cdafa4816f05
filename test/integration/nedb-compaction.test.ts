/**
 * The NeDB data file stays proportional to its live documents: every update appends a whole document, so a few
 * documents updated in a loop (the observer's stat buckets, each remembering 200 stream positions) grew the file
 * without bound between two timed compactions (180 MB in 40 s). The store rewrites the file once the lines appended
 * exceed COMPACT_FACTOR × the live documents (at least COMPACT_MIN_LINES).
 */
import { readFileSync, rmSync, statSync } from "fs";
import path from "path";
import { COMPACT_FACTOR, COMPACT_MIN_LINES, NedbStore } from "../../mixins/stores/nedb.store";
import { tempDir } from "../helpers/platform";

const dir = tempDir("nedb-compaction-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A stat bucket's shape: counters and the last 200 positions it counted (~3 KB a line). */
const bucket = (i: number, n: number) => ({ created: n, updated: 0, deleted: 0, restored: 0, seqs: Array.from({ length: 200 }, (_, k) => 1_700_000_000_000_000 + n * 200 + k), period: "daily", bucket: `b${i}` });

test("a few documents updated thousands of times keep the file within (1 + factor) × max(live, minimum) lines", async () => {
	const file = path.join(dir, "stats.db");
	const store = new NedbStore(file);
	await store.connect();
	const ids = ["a", "b", "c"].map((c) => c.repeat(24));
	for (const [i, _id] of ids.entries()) await store.insert({ _id, ...bucket(i, 0) });
	const UPDATES = 3000;
	let peak = 0;
	for (let n = 1; n <= UPDATES; n++) {
		await store.setOne(ids[n % 3], bucket(n % 3, n));
		if (n % 50 === 0) peak = Math.max(peak, statSync(file).size);
	}
	await store.compact();
	const line = statSync(file).size / ids.length;
	// Without the rule: every update is a line of the file until the 10-minute compaction.
	const unbounded = UPDATES * line;
	const bound = (1 + COMPACT_FACTOR) * Math.max(ids.length, COMPACT_MIN_LINES) * line * 1.1;
	console.log(`NeDB file: peak ${(peak / 1e6).toFixed(2)} MB over ${UPDATES} updates of 3 documents (unbounded: ${(unbounded / 1e6).toFixed(1)} MB); live ${(statSync(file).size / 1e3).toFixed(1)} kB`);
	expect(peak).toBeLessThan(bound);
	expect(peak).toBeLessThan(unbounded / 4);
	await store.disconnect();
	// Nothing lost by the rewrites: the reloaded file holds each document's last version.
	const again = new NedbStore(file);
	await again.connect();
	const docs = await again.find({ query: {}, sort: { bucket: 1 } });
	expect(docs.map((d) => [d._id, d.created])).toEqual([
		[ids[0], 3000],
		[ids[1], 2998],
		[ids[2], 2999],
	]);
	await again.disconnect();
});

test("a store of many documents is not rewritten while its appended lines stay below the factor", async () => {
	const file = path.join(dir, "many.db");
	const store = new NedbStore(file);
	await store.connect();
	await store.insertMany(Array.from({ length: 500 }, (_, i) => ({ _id: String(i).padStart(24, "0"), n: 0 })));
	for (let n = 0; n < 1000; n++) await store.setOne(String(n % 500).padStart(24, "0"), { n: n + 1 });
	// 1500 lines for 500 documents: below 4 × 500, so still every line.
	const lines = readFileSync(file, "utf8").trim().split("\n").length;
	expect(lines).toBeGreaterThanOrEqual(1500);
	await store.disconnect();
});
