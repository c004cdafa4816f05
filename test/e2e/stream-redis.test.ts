/**
 * The production change stream on the local Redis (EVENT_STREAM=redis): consumer groups on Redis Streams through
 * @moleculer/channels. Each test has its own namespace, hence its own stream key (`<namespace>.platform.changes`);
 * the keys are deleted at the end. Skips with a message when Redis is down (fails under REQUIRE_SERVERS=1).
 */
import { randomBytes } from "crypto";
import Redis from "ioredis";
import { ServiceBroker } from "moleculer";
import { bindConfig, readConfig, type PlatformConfig } from "../../runtime/config";
import { channelsMiddleware, channelsStreamFor, type ChannelsStream } from "../../events/channels.stream";
import { needServers } from "../helpers/platform";
import { waitFor } from "../helpers/wait";
import { publishRecords, settle, sorted } from "../helpers/stream";

/** The servers these tests need: decided when the file loads, so jest reports the tests as skipped without them. */
const servers = needServers(["Redis", 6379]);

jest.setTimeout(60_000);

const REDIS_URL = "redis://127.0.0.1:6379";
const RUN = randomBytes(4).toString("hex");
const ACK_WAIT_MS = 1500;
let up = false;
let nsCount = 0;
let nodeCount = 0;
const namespaces: string[] = [];
const nodes: Array<{ stop(): Promise<void> }> = [];

interface StreamNode {
	broker: ServiceBroker;
	stream: ChannelsStream;
	stop(): Promise<void>;
}

function namespace(): string {
	const ns = `sr-${RUN}-${++nsCount}`;
	namespaces.push(ns);
	return ns;
}

async function streamNode(ns: string): Promise<StreamNode> {
	const cfg: PlatformConfig = { ...readConfig(), eventStream: "redis", streamUrl: REDIS_URL, namespace: ns, streamAckWaitMs: ACK_WAIT_MS, logLevel: "error" };
	const broker = new ServiceBroker({
		namespace: ns,
		nodeID: `${ns}-node${++nodeCount}`,
		transporter: null,
		logger: { type: "Console", options: { level: "error" } },
		metrics: { enabled: false },
		middlewares: [channelsMiddleware(cfg)],
	});
	bindConfig(broker, cfg);
	await broker.start();
	let stopped = false;
	const node = {
		broker,
		stream: channelsStreamFor(cfg),
		async stop() {
			if (stopped) return;
			stopped = true;
			await broker.stop();
		},
	};
	nodes.push(node);
	return node;
}

const publish = (node: StreamNode, count: number) => publishRecords(node.stream, count);

beforeAll(async () => {
	up = servers.up;
});

afterAll(async () => {
	for (const n of nodes) await n.stop().catch(() => undefined);
	if (!up) return;
	const redis = new Redis(REDIS_URL);
	try {
		for (const ns of namespaces) {
			const keys = await redis.keys(`${ns}.*`);
			if (keys.length) await redis.del(...keys);
		}
	} finally {
		redis.disconnect();
	}
});

const live = (name: string, fn: () => Promise<void>) =>
	servers.test(name, async () => {
		await fn();
	});

live("instances of one group share the events; another group gets them all, including those published before it existed", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const early = await publish(pub, 3);
	const a = await streamNode(ns);
	const b = await streamNode(ns);
	const gotA: number[] = [];
	const gotB: number[] = [];
	const other: number[] = [];
	await a.stream.consume("dispatcher", async (rec) => void gotA.push(rec.seq));
	await b.stream.consume("dispatcher", async (rec) => void gotB.push(rec.seq));
	await b.stream.consume("observer", async (rec) => void other.push(rec.seq));
	const seqs = [...early, ...(await publish(pub, 30))];
	await waitFor(() => gotA.length + gotB.length >= 33 && other.length >= 33, "both groups");
	await settle();
	expect(sorted([...gotA, ...gotB])).toEqual(seqs);
	expect(sorted(other)).toEqual(seqs);
	expect(await a.stream.ping()).toBe(true);
});

live("batches: the events in flight together come in one call, in order; a failed batch comes back event by event", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const seqs = await publish(pub, 20);
	const c = await streamNode(ns);
	const batches: number[][] = [];
	let failOnce = true;
	await c.stream.consumeBatches(
		"batched",
		async (recs) => {
			if (failOnce && recs.length > 1) {
				failOnce = false;
				throw new Error("the first batch fails");
			}
			batches.push(recs.map((r) => r.seq));
		},
		{ maxInFlight: 8, maxBatch: 5 },
	);
	await waitFor(() => new Set(batches.flat()).size === 20, "every event handled");
	await settle();
	expect(sorted([...new Set(batches.flat())])).toEqual(seqs);
	// Several events per call (up to maxBatch), each batch in stream order.
	expect(Math.max(...batches.map((b) => b.length))).toBeGreaterThan(1);
	expect(Math.max(...batches.map((b) => b.length))).toBeLessThanOrEqual(5);
	for (const b of batches) expect(b).toEqual(sorted(b));
	expect(failOnce).toBe(false);
});

live("an event that failed at a consumer that then stops is not lost: the group's next instance gets it", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const a = await streamNode(ns);
	let failed = 0;
	await a.stream.consume("keeper", async () => {
		failed++;
		throw new Error("fails at A");
	});
	const seqs = await publish(pub, 2);
	await waitFor(() => failed >= 2, "both events failed at A");
	// A graceful stop must keep the failed events claimable (the stock unsubscribe deletes the consumer with them).
	await a.stop();
	const b = await streamNode(ns);
	const gotB: number[] = [];
	await b.stream.consume("keeper", async (rec) => void gotB.push(rec.seq));
	await waitFor(() => gotB.length >= 2, "the failed events at B", ACK_WAIT_MS * 6);
	expect(sorted(gotB)).toEqual(seqs);
});

live("a consumer that restarts continues where it stopped", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const c1 = await streamNode(ns);
	const run1: number[] = [];
	await c1.stream.consume("restarting", async (rec) => void run1.push(rec.seq));
	const before = await publish(pub, 3);
	await waitFor(() => run1.length >= 3, "the first run");
	await c1.stop();
	const during = await publish(pub, 3);
	const c2 = await streamNode(ns);
	const run2: number[] = [];
	await c2.stream.consume("restarting", async (rec) => void run2.push(rec.seq));
	await waitFor(() => run2.length >= 3, "the second run");
	await settle();
	expect(sorted(run1)).toEqual(before);
	expect(sorted(run2)).toEqual(during);
});
