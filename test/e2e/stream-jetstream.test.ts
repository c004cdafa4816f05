/**
 * The production change stream on the local NATS JetStream (EVENT_STREAM=nats): consumer groups through
 * @moleculer/channels, and the relay that feeds them from the outbox. Each test has its own namespace, hence its own
 * stream (`<namespace>_platform_changes`); every stream created here is deleted at the end. Skips with a message
 * when NATS is down (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { randomBytes } from "crypto";
import { rmSync } from "fs";
import { ServiceBroker, type ServiceSchema } from "moleculer";
import { connect, nanos } from "nats";
import { bindConfig, readConfig, type PlatformConfig } from "../../runtime/config";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { channelsMiddleware, channelsStreamFor, type ChannelsStream } from "../../events/channels.stream";
import { relayService, type Relay } from "../../events/relay";
import { bootPlatform, needServers, tempDir, type TestPlatform } from "../helpers/platform";
import { pgTemplate, seedEmbeddedPg } from "../helpers/pg-template";
import { waitFor as waitForBase } from "../helpers/wait";
import { publishRecords, settle, sorted, testRecord } from "../helpers/stream";
import { dropNatsStreams } from "../helpers/nodes";
import { silentProxy } from "../helpers/silent-proxy";

/** The servers these tests need: decided when the file loads, so jest reports the tests as skipped without them. */
const servers = needServers(["NATS", 4222]);
const waitFor = (check: () => boolean, what: string, ms = 20_000) => waitForBase(check, what, ms);

jest.setTimeout(90_000);

const NATS_URL = "nats://127.0.0.1:4222";
const RUN = randomBytes(4).toString("hex");
const ACK_WAIT_MS = 2000;
let up = false;
let nsCount = 0;
let nodeCount = 0;
const namespaces: string[] = [];
const nodes: StreamNode[] = [];

interface StreamNode {
	broker: ServiceBroker;
	cfg: PlatformConfig;
	stream: ChannelsStream;
	stopped: boolean;
	stop(): Promise<void>;
}

/** A namespace of its own: its own stream and groups. */
function namespace(): string {
	const ns = `st-${RUN}-${++nsCount}`;
	namespaces.push(ns);
	return ns;
}

/** A small broker with the channels middleware of EVENT_STREAM=nats (and optional services, e.g. the relay). */
async function streamNode(ns: string, extra: Partial<PlatformConfig> = {}, services: ServiceSchema[] = []): Promise<StreamNode> {
	const cfg: PlatformConfig = { ...readConfig(), eventStream: "nats", streamUrl: NATS_URL, namespace: ns, streamAckWaitMs: ACK_WAIT_MS, logLevel: "error", ...extra };
	const broker = new ServiceBroker({
		namespace: ns,
		nodeID: `${ns}-node${++nodeCount}`,
		transporter: null,
		logger: { type: "Console", options: { level: "error" } },
		metrics: { enabled: false },
		middlewares: [channelsMiddleware(cfg)],
	});
	bindConfig(broker, cfg);
	for (const s of services) broker.createService(s);
	await broker.start();
	const node: StreamNode = {
		broker,
		cfg,
		stream: channelsStreamFor(cfg),
		stopped: false,
		async stop() {
			if (node.stopped) return;
			node.stopped = true;
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
	// Brokers of their own, each with its own connections: stopped together.
	await Promise.all(nodes.map((n) => n.stop().catch(() => undefined)));
	if (up) for (const ns of namespaces) await dropNatsStreams(ns);
});

const live = (name: string, fn: () => Promise<void>) =>
	servers.test(name, async () => {
		await fn();
	});

/**
 * The tests of the top level: each on a namespace of its own (its stream and groups) with brokers of its own, and
 * mostly waiting on NATS (an ack wait, a backoff, a stranded connection's pings), so they run at the same time (jest
 * runs the concurrent tests of a block together, at most 5 at once). The relay's, which start embedded PostgreSQL
 * servers and a platform, run after them, one at a time.
 */
const concurrently = (name: string, fn: () => Promise<void>) => (servers.up ? test.concurrent : test.skip)(name, fn);

concurrently("the stream is limited and groups start from the beginning with a short ack wait", async () => {
	const ns = namespace();
	const node = await streamNode(ns);
	await node.stream.consume("limits", async () => undefined);
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const jsm = await nc.jetstreamManager();
		const info = await jsm.streams.info(`${ns}_platform_changes`);
		expect(info.config.subjects).toEqual([`${ns}.platform.changes`]);
		expect(info.config.max_age).toBe(nanos(168 * 3600_000));
		expect(info.config.max_msgs).toBe(1_000_000);
		const group = await jsm.consumers.info(`${ns}_platform_changes`, "limits");
		expect(group.config.deliver_policy).toBe("all");
		expect(group.config.ack_policy).toBe("explicit");
		expect(group.config.ack_wait).toBe(nanos(ACK_WAIT_MS));
		expect(group.config.max_ack_pending).toBe(1); // one at a time, in order, unless raised
	} finally {
		await nc.close();
	}
	expect(await node.stream.ping()).toBe(true);
});

concurrently("two instances of one group share the events: each is handled once overall", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const a = await streamNode(ns);
	const b = await streamNode(ns);
	const gotA: number[] = [];
	const gotB: number[] = [];
	await a.stream.consume("dispatcher", async (rec) => void gotA.push(rec.seq));
	await b.stream.consume("dispatcher", async (rec) => void gotB.push(rec.seq));
	const seqs = await publish(pub, 40);
	await waitFor(() => gotA.length + gotB.length >= 40, "40 deliveries");
	await settle();
	expect(sorted([...gotA, ...gotB])).toEqual(seqs);
	expect(gotA.length).toBeGreaterThan(0);
	expect(gotB.length).toBeGreaterThan(0);
});

concurrently("two groups each get every event", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const node = await streamNode(ns);
	const observer: number[] = [];
	const logger: number[] = [];
	await node.stream.consume("observer", async (rec) => void observer.push(rec.seq));
	await node.stream.consume("logger", async (rec) => void logger.push(rec.seq));
	const seqs = await publish(pub, 15);
	await waitFor(() => observer.length >= 15 && logger.length >= 15, "both groups");
	await settle();
	// One at a time per group (the default): in stream order.
	expect(observer).toEqual(seqs);
	expect(logger).toEqual(seqs);
});

concurrently("a group created after events were published still gets them (deliver_policy all)", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const early = await publish(pub, 5);
	const node = await streamNode(ns);
	const got: OutboxRecord[] = [];
	await node.stream.consume("late-group", async (rec) => void got.push(rec));
	await waitFor(() => got.length >= 5, "the earlier events");
	await settle();
	expect(sorted(got.map((r) => r.seq))).toEqual(early);
	// The message is the outbox record itself.
	expect(got[0]).toMatchObject({ event: { op: "c", topic: "content.notes" }, clients: ["c1"], actor: { uid: "u1" } });
});

concurrently("a handler that throws gets the event again (after a backoff) and it is acknowledged once handled", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const node = await streamNode(ns);
	const attempts = new Map<number, number>();
	const handled: number[] = [];
	const consumer = await node.stream.consume("flaky", async (rec) => {
		const n = (attempts.get(rec.seq) ?? 0) + 1;
		attempts.set(rec.seq, n);
		if (n === 1) throw new Error("first attempt fails");
		handled.push(rec.seq);
	});
	const seqs = await publish(pub, 4);
	await waitFor(() => handled.length >= 4, "every event handled on its second delivery");
	await settle(ACK_WAIT_MS + 500);
	expect(sorted(handled)).toEqual(seqs);
	expect([...attempts.values()]).toEqual([2, 2, 2, 2]);
	expect(consumer.position()).toBe(seqs[3]);
});

concurrently("an event that keeps failing moves to the dead-letter stream after the retries", async () => {
	const ns = namespace();
	const node = await streamNode(ns, { streamMaxRetries: 2 });
	let calls = 0;
	await node.stream.consume("hopeless", async () => {
		calls++;
		throw new Error("always fails");
	});
	await publish(node, 1);
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const jsm = await nc.jetstreamManager();
		let dead = 0;
		for (let i = 0; i < 60 && dead < 1; i++) {
			dead = await jsm.streams.info(`${ns}_platform_changes_failed`).then(
				(s) => s.state.messages,
				() => 0,
			);
			if (dead < 1) await settle(250);
		}
		expect(dead).toBe(1);
		expect(calls).toBe(2);
	} finally {
		await nc.close();
	}
});

concurrently("a consumer that crashes before acknowledging: its events go to the group's other instance", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const a = await streamNode(ns);
	const gotA: number[] = [];
	let release!: () => void;
	const gate = new Promise<void>((r) => (release = r));
	// Instance A takes the events and never finishes them.
	await a.stream.consume(
		"crashy",
		async (rec) => {
			gotA.push(rec.seq);
			await gate;
		},
		{ maxInFlight: 8 },
	);
	const first = await publish(pub, 3);
	await waitFor(() => gotA.length === 3, "A holding all three");

	const b = await streamNode(ns);
	const gotB: number[] = [];
	await b.stream.consume("crashy", async (rec) => void gotB.push(rec.seq), { maxInFlight: 8 });
	await settle(300);
	expect(gotB).toEqual([]); // in progress at A: not handed out twice while A is alive

	// The crash: A's connection goes away without an acknowledgement.
	const started = Date.now();
	await (a.broker as any).channelAdapter.connection.close();
	await waitFor(() => gotB.length >= 3, "A's events redelivered to B", ACK_WAIT_MS * 5);
	expect(Date.now() - started).toBeLessThan(ACK_WAIT_MS * 4);
	expect(sorted(gotB)).toEqual(first);

	const more = await publish(pub, 2);
	await waitFor(() => gotB.length >= 5, "the later events at B");
	expect(sorted(gotB)).toEqual([...first, ...more]);
	release();
	await settle(100);
});

concurrently("an instance whose connection is stranded (silent for good, new connections pass) gets the group's events again on its new connection", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const proxy = await silentProxy(4222);
	const a = await streamNode(ns, { streamUrl: `nats://${proxy.address}` });
	try {
		const got: number[] = [];
		await a.stream.consume("stranded", async (rec) => void got.push(rec.seq));
		const first = await publish(pub, 3);
		await waitFor(() => first.every((s) => got.includes(s)), "the events before the stranding");
		// The server keeps the stranded connection and what it subscribed: nothing tells it the connection is gone.
		proxy.silence({ newConnections: false });
		const t0 = Date.now();
		const later = await publish(pub, 30);
		await waitFor(() => later.every((s) => got.includes(s)), "the events after the stranding", 60_000);
		const ms = Date.now() - t0;
		console.log(`stranded stream connection: 30 events published after it all handled ${ms} ms after the stranding`);
		// The connection is given up within 6 s (pings every 2 s), then a redelivery or two wait out the ack wait (2 s).
		expect(ms).toBeLessThan(12_000);
		// At least once: an event handled just before the stranding whose acknowledgement went down the stranded
		// connection is delivered again on the new one. Every event arrives; none is invented.
		expect(sorted([...new Set(got)])).toEqual([...first, ...later]);
	} finally {
		await a.stop();
		await proxy.close();
	}
});

concurrently("a push group of an earlier version becomes a pull group that starts after its acknowledgement floor", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const seqs = await publish(pub, 5);
	const stream = `${ns}_platform_changes`;
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const jsm = await nc.jetstreamManager();
		// As the adapter made groups before: a durable push consumer; its instance acknowledged the first three events.
		await jsm.consumers.add(stream, {
			durable_name: "legacy",
			deliver_subject: `${ns}.legacy.deliver`,
			deliver_group: stream,
			deliver_policy: "all" as any,
			ack_policy: "explicit" as any,
			filter_subject: `${ns}.platform.changes`,
		});
		let acked = 0;
		const sub = nc.subscribe(`${ns}.legacy.deliver`, { queue: stream, callback: (_e, m) => void (acked++ < 3 && m.respond(new TextEncoder().encode("+ACK"))) });
		await waitFor(() => acked >= 5, "the push group's five deliveries");
		sub.unsubscribe();
		await nc.flush();
		expect((await jsm.consumers.info(stream, "legacy")).ack_floor.stream_seq).toBe(3);

		const node = await streamNode(ns);
		const got: number[] = [];
		await node.stream.consume("legacy", async (rec) => void got.push(rec.seq));
		await waitFor(() => got.length >= 2, "the events after the floor");
		await settle(500);
		expect(sorted(got)).toEqual(seqs.slice(3));
		const group = await jsm.consumers.info(stream, "legacy");
		expect([group.config.deliver_subject, group.config.ack_wait, group.num_pending, group.num_ack_pending]).toEqual([undefined, nanos(ACK_WAIT_MS), 0, 0]);
	} finally {
		await nc.close();
	}
});

concurrently("a consumer that restarts continues where it stopped: nothing lost, nothing repeated", async () => {
	const ns = namespace();
	const pub = await streamNode(ns);
	const c1 = await streamNode(ns);
	const run1: number[] = [];
	await c1.stream.consume("restarting", async (rec) => void run1.push(rec.seq));
	const before = await publish(pub, 3);
	await waitFor(() => run1.length >= 3, "the first run");
	await c1.stop();

	const during = await publish(pub, 4);
	const c2 = await streamNode(ns);
	const run2: number[] = [];
	await c2.stream.consume("restarting", async (rec) => void run2.push(rec.seq));
	const after = await publish(pub, 2);
	await waitFor(() => run2.length >= 6, "the second run");
	await settle();
	expect(sorted(run1)).toEqual(before);
	expect(sorted(run2)).toEqual([...during, ...after]);
});

describe("the relay", () => {
	live("one relay per outbox publishes; when it stops another takes over from its position", async () => {
		const ns = namespace();
		const dataDir = tempDir("relay-test-");
		// The outbox the test appends to is the relays' own: the same store (the test's) in the same DATA_DIR.
		const store = { dataDir } as const;
		if (await pgTemplate()) seedEmbeddedPg(dataDir, undefined);
		const outbox = sharedOutbox(store);
		const relays: StreamNode[] = [];
		try {
			await outbox.connect();
			const consumer = await streamNode(ns);
			const got: OutboxRecord[] = [];
			await consumer.stream.consume("relay-probe", async (rec) => void got.push(rec));
			const r1 = await streamNode(ns, store, [relayService()]);
			const r2 = await streamNode(ns, store, [relayService()]);
			relays.push(r1, r2);
			const relayOf = (n: StreamNode) => (n.broker.getLocalService("relay") as any).relay as Relay;
			const append = async (n: number) =>
				(
					await outbox.append(
						Array.from({ length: n }, () => {
							const { seq: _s, ...r } = testRecord();
							return r;
						}),
					)
				).map((r) => r.seq);

			const first = await append(5);
			await waitFor(() => got.length >= 5, "the first five");
			await waitFor(() => relayOf(r1).leader || relayOf(r2).leader, "a leader");
			// A relay counts a record once NATS acknowledged it, which may come after the consumer already has it.
			await waitFor(() => relayOf(r1).published + relayOf(r2).published >= 5, "the first five counted as published");
			const [leader, other] = relayOf(r1).leader ? [r1, r2] : [r2, r1];
			expect(relayOf(other).leader).toBe(false);
			expect(relayOf(leader).published).toBe(5);
			expect(relayOf(other).published).toBe(0);

			await leader.stop();
			const second = await append(5);
			await waitFor(() => got.length >= 10, "the next five, through the other relay");
			await settle();
			expect(relayOf(other).leader).toBe(true);
			expect(relayOf(other).published).toBe(5);
			// In seq order, each once.
			expect(got.map((r) => r.seq)).toEqual([...first, ...second]);
		} finally {
			// The store's last user stops the embedded PostgreSQL of the DATA_DIR before it is removed.
			for (const r of relays) await r.stop();
			await outbox.disconnect();
			rmSync(dataDir, { recursive: true, force: true });
		}
	});

	describe("inside the platform", () => {
		let p: TestPlatform | undefined;
		afterAll(async () => {
			await p?.cleanup();
		});

		live("writes reach a group through the relay, across a platform restart, in seq order", async () => {
			const ns = namespace();
			p = await bootPlatform({ eventStream: "nats", streamUrl: NATS_URL, namespace: ns, streamAckWaitMs: ACK_WAIT_MS });
			const notes = (recs: OutboxRecord[]) => recs.filter((r) => r.event.topic === "content.notes");
			const create = async (title: string) => {
				const token = await p!.rootToken();
				const r = await p!.http("POST", "/content/notes", { token, body: { title } });
				expect(r.status).toBe(200);
				return r.body.data.id as string;
			};

			const c1 = await streamNode(ns);
			const run1: OutboxRecord[] = [];
			await c1.stream.consume("relay-probe", async (rec) => void run1.push(rec));
			const a = await create("a");
			const b = await create("b");
			await waitFor(() => notes(run1).length >= 2, "the first two notes");
			// The bootstrap's own writes (root user, client) came first: the group read the stream from its start.
			expect(run1.length).toBeGreaterThan(2);
			await c1.stop();

			const down = await create("while the group is down");
			await p.restart();
			const after = await create("after the platform restart");
			const c2 = await streamNode(ns);
			const run2: OutboxRecord[] = [];
			await c2.stream.consume("relay-probe", async (rec) => void run2.push(rec));
			await waitFor(() => notes(run2).length >= 2, "the notes written since");
			await settle();
			expect(notes(run1).map((r) => r.event.id)).toEqual([a, b]);
			expect(notes(run2).map((r) => r.event.id)).toEqual([down, after]);
			const seqs = [...run1, ...run2].map((r) => r.seq);
			expect(seqs).toEqual(sorted(seqs));
			expect(new Set(seqs).size).toBe(seqs.length);
		});
	});
});
