/**
 * The embedded store's short write path (mixins/stores/nedb.append.ts): the data file stays open between writes, and
 * nothing is lost when compaction replaces the file under it: every write, before and after a compaction, is in the
 * file a restart loads.
 */
import { readdirSync, readFileSync, readlinkSync, rmSync } from "fs";
import path from "path";
import { NedbStore } from "../../mixins/stores/nedb.store";
import { tempDir } from "../helpers/platform";

let dir: string;
beforeEach(() => (dir = tempDir("nedb-append-")));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const openFds = (file: string) => readdirSync("/proc/self/fd").filter((fd) => {
	try {
		return readlinkSync(`/proc/self/fd/${fd}`) === file;
	} catch {
		return false;
	}
}).length;

test("writes before and after a compaction all reach the file a restart loads; one handle, closed at disconnect", async () => {
	const file = path.join(dir, "notes.db");
	const store = new NedbStore(file);
	await store.connect();
	await store.insert({ _id: "a", n: 1 });
	await store.insertMany([{ _id: "b", n: 2 }, { _id: "c", n: 3 }]);
	await store.setOne("a", { n: 10 });
	// One handle kept open across the writes (appendFile would leave none).
	expect(openFds(file)).toBe(1);
	await store.compact();
	// The compaction wrote a new file and renamed it over the old one: later writes must land in the new one.
	await store.insert({ _id: "d", n: 4 });
	await store.removeMany({ _id: "b" });
	expect(openFds(file)).toBe(1);
	await store.disconnect();
	expect(openFds(file)).toBe(0);
	const lines = readFileSync(file, "utf8").trim().split("\n");
	expect(lines.some((l) => l.includes('"_id":"d"'))).toBe(true);

	const again = new NedbStore(file);
	await again.connect();
	const docs = await again.find({ query: {}, sort: { _id: 1 } });
	expect(docs.map((d) => [d._id, d.n])).toEqual([["a", 10], ["c", 3], ["d", 4]]);
	await again.disconnect();
});

test("a store without a file keeps working in memory", async () => {
	const store = new NedbStore(undefined);
	await store.connect();
	await store.insert({ _id: "x", n: 1 });
	expect((await store.findOne({ id: "x" }))?.n).toBe(1);
	await store.disconnect();
});
