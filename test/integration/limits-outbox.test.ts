/**
 * Outbox retention (docs/contracts.md "Limits the platform keeps": the outbox keeps an event until every consumer group
 * has passed it, then at most STREAM_RETENTION_HOURS). The attack: 100 patches of a large note, each event
 * carrying the whole document before and after (~100 MB of events before the fix stayed on disk, and a restart
 * loaded them all into memory: more than the 80 MB the restart may add).
 */
// jest-solo: times the event loop under a storm of requests (the /status bound; test/run.mjs)
import { rmSync } from "fs";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { describeProbe, expectStatusHeldUnder, startStatusProbe } from "../helpers/status-probe";
import { startChild } from "../helpers/child";
import { sleep } from "../helpers/wait";
import { Outbox, sharedOutbox } from "../../events/outbox";
import { createStore } from "../../stores";
import { Relay } from "../../events/relay";
import { readConfig } from "../../runtime/config";
import { openRelational, releaseRelational } from "../../runtime/relational";
import { OUTBOX_TABLE } from "../../stores/pg.outbox";

const PATCHES = 100;
const KB = 500;
const MB = 1024 * 1024;

let p: TestPlatform | undefined;
const dirs: string[] = [];
afterAll(async () => {
	await p?.cleanup();
	for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test(`${PATCHES} patches of a ${KB} KB note: once every group has passed them the outbox shrinks in entries; a restart stays small`, async () => {
	// No grace: the outbox may drop what every group passed at once.
	p = await bootPlatform({ outboxGraceMs: 0 });
	const token = await p.rootToken();
	const note = await p.http("POST", "/content/notes", { token, body: { title: "big", content: "y".repeat(KB * 1024) } });
	expect(note.status).toBe(200);
	const outbox = sharedOutbox(p.cfg);
	const probe = startStatusProbe(p.url);
	for (let i = 0; i < PATCHES; i++) {
		const r = await p.http("PATCH", `/content/notes/${note.body.data.id}`, { token, body: { title: `big ${i}` } });
		expect(r.status).toBe(200);
	}
	// What was written: at least one document image of KB per patch.
	const written = PATCHES * KB * 1024;
	// Every worker group reads the events; then the outbox drops them.
	const until = Date.now() + 90_000;
	while ((await outbox.count()) > 5) {
		if (Date.now() > until) throw new Error(`outbox still holds ${await outbox.count()} records`);
		await sleep(250);
	}
	console.log(`outbox: ${describeProbe(await expectStatusHeldUnder(probe))}`);
	// Each group has passed every event (nothing was dropped before it was read).
	const offsets = createStore(p.cfg, "_stream_offsets");
	await offsets.connect();
	const groups = await offsets.find({ query: {} });
	await offsets.disconnect();
	expect(groups.length).toBeGreaterThanOrEqual(5);

	// A restart as `npm start` runs it: memory stays near a fresh platform's.
	const dataDir = p.dataDir;
	dirs.push(dataDir);
	await p.stop();
	p = undefined;
	const freshDir = tempDir("outbox-fresh-");
	dirs.push(freshDir);
	// Both children with the young generation of Node 20 and 22 (16 MB semi-spaces). The bound is about data a restart
	// retains; Node 24 would grow its young generation to several times that under the restart's load and keep it, which
	// is the collector's room, not retained data.
	const heap = ["--max-semi-space-size=16"];
	const fresh = await startChild({ DATA_DIR: freshDir }, undefined, heap);
	await sleep(1500);
	const freshRss = fresh.rss();
	await fresh.stop();
	const again = await startChild({ DATA_DIR: dataDir }, undefined, heap);
	await sleep(1500);
	const rss = again.rss();
	await again.stop();
	console.log(`outbox: ${(written / MB).toFixed(0)} MB of images written; RSS fresh ${(freshRss / MB).toFixed(0)} MB, after restart ${(rss / MB).toFixed(0)} MB`);
	expect(rss - freshRss).toBeLessThan(80 * MB);
}, 240_000);

test("retention: records older than STREAM_RETENTION_HOURS go even when a group has not passed them; unread newer ones stay", async () => {
	const dir = tempDir("outbox-retention-");
	dirs.push(dir);
	const ob = new Outbox({ dataDir: dir });
	await ob.connect();
	try {
		const ev = (n: number) => ({ event: { id: String(n) } as any, clients: [], actor: {} });
		await ob.append([ev(1), ev(2), ev(3)]);
		const [last] = await ob.append([ev(4)]);
		// Nobody passed anything, retention not reached: all stay.
		expect(await ob.prune(0, 168)).toBe(0);
		expect(await ob.count()).toBe(4);
		// A group passed the third: the first three go, the fourth stays.
		const third = (await ob.readFrom(0, 10))[2].seq;
		// Positions are microsecond-scaled times: records of the current millisecond are not "past" yet.
		await sleep(2);
		// Within the grace (default 60 s) passed records stay for readers that tail the outbox; without it they go.
		// Asked at once, each pass keeps its own bounds (one at a time: the second is not answered with the first).
		expect(await Promise.all([ob.prune(third, 168), ob.prune(third, 168, 0)])).toEqual([0, 3]);
		expect((await ob.readFrom(0, 10)).map((r) => r.seq)).toEqual([last.seq]);
		// Retention reached (the fourth made two hours old; retention counts whole hours): it goes though nobody passed it.
		expect(await ob.prune(0, 1, 0)).toBe(0);
		const rel = await openRelational({ dataDir: dir });
		await rel.query(`update "${OUTBOX_TABLE}" set at = now() - interval '2 hours'`);
		await releaseRelational({ dataDir: dir });
		expect(await ob.prune(0, 1, 0)).toBe(1);
		expect(await ob.count()).toBe(0);
	} finally {
		await ob.disconnect();
	}
});

test("production relay: the leader removes what the relay has published", async () => {
	const dir = tempDir("outbox-relay-");
	dirs.push(dir);
	const cfg = { ...readConfig(), dataDir: dir, redisUrl: undefined, namespace: `relay-prune-${Date.now()}`, outboxGraceMs: 0 };
	const published: number[] = [];
	const stream = { opts: { channel: "changes" }, subject: "changes", isConnected: () => true, publish: async (r: { seq: number }) => void published.push(r.seq) };
	const writer = sharedOutbox(cfg);
	await writer.connect();
	const relay = new Relay(cfg, stream as any, { warn: () => undefined, info: () => undefined }, "n1");
	relay.start();
	try {
		const seqs = (await writer.append(Array.from({ length: 50 }, (_, n) => ({ event: { id: String(n) } as any, clients: [], actor: {} })))).map((r) => r.seq);
		const until = Date.now() + 15_000;
		while (published.length < 50 || (await writer.count()) > 0) {
			if (Date.now() > until) throw new Error(`published ${published.length}, outbox holds ${await writer.count()}`);
			await sleep(100);
		}
		expect(published).toEqual(seqs);
	} finally {
		await relay.stop();
		await writer.disconnect();
	}
});
