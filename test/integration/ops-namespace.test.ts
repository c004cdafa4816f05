/**
 * Nodes that disagree on NAMESPACE (issue "Operating it", item 1c), on one PostgreSQL database: a node started once
 * with the wrong NAMESPACE
 * - republishes nothing of the other deployment's outbox into its own stream (each relay publishes the records its
 *   namespace wrote), and the right relay publishes none of its;
 * - leaves positions (its relay's, its embedded consumer groups') that hold outbox records back only while renewed:
 *   once not renewed for STREAM_POSITION_TTL_MS the other deployment's pruner passes them, so the records every live
 *   consumer has passed go (before: kept for STREAM_RETENTION_HOURS, 168 h).
 */
import { rmSync } from "fs";
import { Relay } from "../../events/relay";
import { OutboxStream } from "../../events/stream";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import type { ChannelsStream } from "../../events/channels.stream";
import type { PlatformConfig } from "../../runtime/config";
import { createStore } from "../../stores";
import { needServers, tempDir } from "../helpers/platform";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { unique } from "../helpers/samples";
import { sleep, waitForValue } from "../helpers/wait";

const servers = needServers(["PostgreSQL", 5432]);
const TTL_MS = 1500;

let pg: TestDatabase | undefined;
const dir = tempDir("ops-namespace-");
beforeAll(async () => {
	pg = await testDatabase();
}, 30_000);
afterAll(async () => {
	await pg?.drop();
	rmSync(dir, { recursive: true, force: true });
});

/** A node's settings on the shared database, in namespace `ns`. */
const nodeCfg = (ns: string) =>
	({ dataDir: dir, databaseUrl: pg!.url, namespace: ns, streamRetentionHours: 168, outboxGraceMs: 0, streamPositionTtlMs: TTL_MS }) as unknown as PlatformConfig;

/** The production stream of a relay, recording what it is given. */
function fakeStream() {
	const published: OutboxRecord[] = [];
	const stream = { opts: { channel: "platform.changes" }, subject: "platform.changes", isConnected: () => true, publish: async (rec: OutboxRecord) => void published.push(rec) };
	return { stream: stream as unknown as ChannelsStream, published };
}

const records = (n: number, tag: string) => Array.from({ length: n }, (_, i) => ({ event: { id: `${tag}-${i}` } as any, clients: [], actor: {} }));

async function positions(cfg: PlatformConfig, collection: string): Promise<Array<Record<string, any>>> {
	const store = createStore(cfg, collection);
	await store.connect();
	try {
		return await store.find({ query: {} });
	} finally {
		await store.disconnect();
	}
}

/** Runs pruning passes until the outbox holds `n` records or `ms` went by; the count then. */
async function prunedTo(outbox: ReturnType<typeof sharedOutbox>, pass: () => Promise<void>, n: number, ms = 15_000): Promise<number> {
	const end = Date.now() + ms;
	for (;;) {
		await pass();
		const count = await outbox.count();
		if (count <= n || Date.now() > end) return count;
		await sleep(200);
	}
}

servers.describe("two namespaces on one database", () => {
	test("each relay publishes its own namespace's records; the wrong node's relay position stops holding the outbox once not renewed", async () => {
		const right = nodeCfg(`right-${unique()}`);
		const wrong = nodeCfg(`wrong-${unique()}`);
		const outRight = sharedOutbox(right);
		const outWrong = sharedOutbox(wrong);
		await outRight.connect();
		await outWrong.connect();
		const warnings: string[] = [];
		const logger = { warn: (m: unknown) => void warnings.push(String(m)), info: () => undefined };
		const relays: Relay[] = [];
		try {
			const r = fakeStream();
			const relayRight = new Relay(right, r.stream, logger, "right-node");
			relays.push(relayRight);
			relayRight.start();
			const first = await outRight.append(records(201, "right"));
			await waitForValue("the right relay's records", async () => relayRight.position >= first[200].seq);

			// A node started once with the wrong NAMESPACE on the same database: it republishes none of them.
			const w = fakeStream();
			const relayWrong = new Relay(wrong, w.stream, logger, "wrong-node");
			relays.push(relayWrong);
			relayWrong.start();
			await waitForValue("the wrong relay past the right deployment's records", async () => relayWrong.position >= first[200].seq);
			const [own] = await outWrong.append(records(1, "wrong"));
			await waitForValue("the wrong relay's own record", async () => w.published.length >= 1);
			expect(w.published.map((rec) => [rec.event.id, rec.ns])).toEqual([["wrong-0", wrong.namespace]]);
			expect(warnings.some((m) => m.includes(`namespace ${right.namespace}`))).toBe(true);
			await relayWrong.stop();
			// Its position stays behind, with the heartbeat it no longer renews.
			const left = (await positions(right, "_relay_offsets")).find((d) => d.id === `relay:${wrong.namespace}.platform.changes`);
			expect(left).toMatchObject({ seq: own.seq, ns: wrong.namespace });
			expect(typeof left!.at).toBe("number");

			const later = await outRight.append(records(201, "right-later"));
			await waitForValue("the right relay's later records", async () => relayRight.position >= later[200].seq);
			// The right relay published its own records only, each once.
			expect(r.published.map((rec) => rec.seq)).toEqual([...first, ...later].map((rec) => rec.seq));
			expect(r.published.every((rec) => rec.ns === right.namespace)).toBe(true);
			// The wrong node's position, not renewed for the TTL, no longer holds the 201 later records.
			await sleep(TTL_MS + 200);
			expect(await prunedTo(outRight, () => relayRight.pruner.runOnce(), 0)).toBe(0);
		} finally {
			for (const relay of relays) await relay.stop().catch(() => undefined);
			await outRight.disconnect();
			await outWrong.disconnect();
		}
	}, 60_000);

	test("an embedded consumer group of another namespace holds records while it renews its position, not after", async () => {
		const right = nodeCfg(`right-${unique()}`);
		const wrong = nodeCfg(`wrong-${unique()}`);
		const outRight = sharedOutbox(right);
		await outRight.connect();
		const streamRight = new OutboxStream(right);
		const streamWrong = new OutboxStream(wrong);
		try {
			await outRight.append(records(50, "before"));
			// The wrong node's group is alive but stuck on its first record: its position stays, renewed.
			let fail!: () => void;
			const stuck = new Promise<void>((_, reject) => (fail = () => reject(new Error("given up"))));
			const wrongGroup = await streamWrong.consume(`observer-${unique()}`, () => stuck);
			const seen: number[] = [];
			const rightGroup = await streamRight.consume(`observer-${unique()}`, async (rec) => void seen.push(rec.seq));
			await waitForValue("the right group through the records", async () => seen.length === 50);
			await sleep(2 * TTL_MS);
			expect(await prunedTo(outRight, () => streamRight.pruner.runOnce(), 0, 0)).toBe(50);
			// The wrong node goes away: its group's position stays behind, and stops counting a TTL later.
			fail();
			await wrongGroup.stop();
			await streamWrong.close();
			const left = (await positions(right, "_stream_offsets")).filter((d) => d.ns === wrong.namespace);
			expect(left).toEqual([expect.objectContaining({ seq: 0, at: expect.any(Number) })]);
			await sleep(TTL_MS + 200);
			expect(await prunedTo(outRight, () => streamRight.pruner.runOnce(), 0)).toBe(0);
			await rightGroup.stop();
		} finally {
			await streamWrong.close().catch(() => undefined);
			await streamRight.close();
			await outRight.disconnect();
		}
	}, 60_000);
});
