/**
 * The failover pieces on real brokers (Moleculer's in-memory transporter, one process): a node that vanishes without
 * a word (no DISCONNECT, no more heartbeats, its requests fall into the void) is dropped within the heartbeat
 * timeout; reads cut off by that are answered by another node, writes are not repeated; a node restarted under the
 * same id fails its previous instance's pending requests at once; a call aimed at a node that has left, or still
 * waiting on a node when it says goodbye, goes to another node; a call that finds no node waits for one; a node
 * announces its services as soon as it has started.
 */
import { randomBytes } from "crypto";
import { ServiceBroker, type BrokerOptions } from "moleculer";
import { FailoverDiscoverer } from "../../runtime/failover-discoverer";
import { FailoverMiddleware } from "../../runtime/failover.middleware";
import { transportFailure } from "../../runtime/failover";

jest.setTimeout(30_000);

const brokers: ServiceBroker[] = [];
let namespace = "";
const ran: Record<string, string[]> = {};

function broker(nodeID: string, opts: Partial<BrokerOptions> = {}): ServiceBroker {
	const b = new ServiceBroker({
		namespace,
		nodeID,
		transporter: "Fake",
		logger: false,
		heartbeatInterval: 1,
		heartbeatTimeout: 2,
		requestTimeout: 20_000,
		registry: { strategy: "RoundRobin", discoverer: new FailoverDiscoverer() },
		circuitBreaker: { enabled: true, threshold: 0.5, minRequestCount: 10, windowTime: 30, halfOpenTime: 5000, check: transportFailure },
		middlewares: [FailoverMiddleware(3000) as any],
		...opts,
	});
	brokers.push(b);
	return b;
}

/** A replica: `read` (a collection read) and `write`; each records which node ran it. */
function replica(nodeID: string, opts: Partial<BrokerOptions> = {}, slowMs = 0): ServiceBroker {
	const b = broker(nodeID, opts);
	b.createService({
		name: "notes",
		actions: {
			read: {
				collection: { level: "read" },
				async handler(ctx: any) {
					await delay(slowMs);
					(ran.read ??= []).push(nodeID);
					ctx.meta.servedBy = nodeID;
					return nodeID;
				},
			} as any,
			write: { collection: { level: "write" }, handler: async () => (await delay(slowMs), (ran.write ??= []).push(nodeID), nodeID) } as any,
		},
	});
	return b;
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Gone without a word: heartbeats stop and its subscriptions vanish, as when its process is SIGKILLed. */
function vanish(b: ServiceBroker): void {
	const any = b as any;
	any.registry.discoverer.stopHeartbeatTimers();
	any.transit.tx.disconnect();
	any.transit.connected = false;
}

async function settled(caller: ServiceBroker, n: number): Promise<void> {
	const deadline = Date.now() + 5000;
	while (((caller.registry as any).getActionEndpoints("notes.read")?.endpoints.filter((e: any) => e.isAvailable).length ?? 0) < n) {
		if (Date.now() > deadline) throw new Error(`notes.read has not ${n} nodes`);
		await delay(20);
	}
}

beforeEach(() => {
	namespace = `failover-${randomBytes(4).toString("hex")}`;
	for (const k of Object.keys(ran)) delete ran[k];
});

afterEach(async () => {
	await Promise.all(brokers.splice(0).map((b) => b.stop().catch(() => undefined)));
});

test("a node gone without a word: dropped within the heartbeat timeout; reads answered by the survivor, writes not repeated", async () => {
	const gw = broker("gw");
	const a = replica("a", {}, 300);
	const b = replica("b", {}, 300);
	await Promise.all([gw.start(), a.start(), b.start()]);
	await settled(gw, 2);
	vanish(a);
	const t0 = Date.now();
	const dropped = new Promise<number>((resolve) => gw.localBus.on("$node.disconnected", ({ node }: any) => node.id === "a" && resolve(Date.now() - t0)));
	const outcome = (action: string) =>
		gw.call(action).then(
			(v) => ({ ok: v }),
			(e) => ({ err: e.name }),
		);
	const [reads, writes] = await Promise.all([Promise.all([1, 2, 3, 4, 5, 6].map(() => outcome("notes.read"))), Promise.all([1, 2, 3, 4, 5, 6].map(() => outcome("notes.write")))]);
	const droppedMs = await dropped;
	// Timeout 2 s, checked every 250 ms (the stock check: up to 2 × 2 s + 1 s).
	expect(droppedMs).toBeGreaterThanOrEqual(1500);
	expect(droppedMs).toBeLessThan(3200);
	expect(reads).toEqual(Array(6).fill({ ok: "b" }));
	expect(ran.read).toEqual(Array(6).fill("b"));
	// Writes sent to the dead node were cut off by its drop: they may have run, so they fail (503 at the gateway).
	const lost = writes.filter((w) => "err" in w);
	expect(lost.length).toBeGreaterThan(0);
	expect(lost).toEqual(Array(lost.length).fill({ err: "RequestRejectedError" }));
	expect(writes.filter((w) => "ok" in w)).toEqual(Array(6 - lost.length).fill({ ok: "b" }));
	// After the drop every call goes to the survivor.
	expect(await Promise.all([1, 2, 3, 4].map(() => gw.call("notes.write")))).toEqual(["b", "b", "b", "b"]);
});

test("a node restarted under its id fails its previous instance's pending requests at once", async () => {
	const gw = broker("gw", { heartbeatTimeout: 30 });
	const a = replica("a", { heartbeatTimeout: 30 });
	await Promise.all([gw.start(), a.start()]);
	await settled(gw, 1);
	vanish(a);
	const t0 = Date.now();
	// Aimed at node a: never sent again, so this shows the rejection itself.
	const pending = gw.call("notes.write", {}, { nodeID: "a" }).then(
		() => "answered",
		(e) => e.name,
	);
	await delay(300);
	const a2 = replica("a", { heartbeatTimeout: 30 });
	await a2.start();
	expect(await pending).toBe("RequestRejectedError");
	expect(Date.now() - t0).toBeLessThan(3000);
	expect(ran.write ?? []).toEqual([]);
	// The new instance serves.
	await settled(gw, 1);
	expect(await gw.call("notes.write")).toBe("a");
});

test("a call given an endpoint chosen before its node stopped (moleculer-web chooses it before authentication) is answered by another node at once, run once", async () => {
	const gw = broker("gw");
	const a = replica("a");
	const b = replica("b");
	await Promise.all([gw.start(), a.start(), b.start()]);
	await settled(gw, 2);
	const chosen = (gw.registry as any).getActionEndpoints("notes.write").endpoints.find((e: any) => e.id === "a");
	// Node a stops (tracking: nothing in flight) and disconnects while the request is still being authenticated.
	const gone = new Promise<void>((resolve) => gw.localBus.on("$node.disconnected", ({ node }: any) => node.id === "a" && resolve()));
	await a.stop();
	await gone;
	const t0 = Date.now();
	const outcome = await Promise.race([
		gw.call(chosen, {}).then(
			(v) => `answered by ${v}`,
			(e) => e.name,
		),
		delay(5000).then(() => "no answer within 5 s"),
	]);
	expect(outcome).toBe("answered by b");
	expect(Date.now() - t0).toBeLessThan(1000);
	expect(ran.write).toEqual(["b"]);
});

test("a node that says goodbye: a request to it sent within the shutdown timeout never ran there and goes to another node; an older one may have run and fails", async () => {
	const gw = broker("gw", { tracking: { enabled: true, shutdownTimeout: 1000 } });
	const a = replica("a");
	const b = replica("b");
	await Promise.all([gw.start(), a.start(), b.start()]);
	await settled(gw, 2);
	const chosen = (gw.registry as any).getActionEndpoints("notes.write").endpoints.find((e: any) => e.id === "a");
	// Requests that reach node a no more: as when they are sent after it left the transporter, nobody answers them.
	(a as any).transit.requestHandler = () => Promise.resolve();
	const outcome = (p: Promise<unknown>) =>
		p.then(
			(v) => `answered by ${v}`,
			(e) => e.name,
		);
	const older = outcome(gw.call(chosen, {}));
	await delay(1200);
	const recent = outcome(gw.call(chosen, {}));
	await delay(100);
	const t0 = Date.now();
	await a.stop();
	expect(await recent).toBe("answered by b");
	expect(Date.now() - t0).toBeLessThan(1000);
	// Sent longer than the shutdown timeout ago: it could have been running when the node gave up waiting for it.
	expect(await older).toBe("RequestRejectedError");
	expect(ran.write).toEqual(["b"]);
});

test("a call that finds no node waits for one (up to FAILOVER_WAIT_MS), then 503s", async () => {
	const gw = broker("gw");
	await gw.start();
	const t0 = Date.now();
	const late = gw.call("notes.write");
	await delay(700);
	const a = replica("a");
	await a.start();
	expect(await late).toBe("a");
	expect(Date.now() - t0).toBeGreaterThanOrEqual(700);
	const t1 = Date.now();
	await expect(gw.call("nothing.here")).rejects.toMatchObject({ name: "ServiceNotFoundError" });
	expect(Date.now() - t1).toBeGreaterThanOrEqual(2500);
	expect(Date.now() - t1).toBeLessThan(4500);
});

test("the callee's meta still comes back to the caller through the failover wrapper", async () => {
	const gw = broker("gw");
	gw.createService({
		name: "probe",
		actions: {
			async go(ctx: any) {
				await ctx.call("notes.read");
				return ctx.meta.servedBy;
			},
		},
	});
	const a = replica("a");
	await Promise.all([gw.start(), a.start()]);
	await settled(gw, 1);
	expect(await gw.call("probe.go")).toBe("a");
});

test("an endpoint that keeps timing out is left out by the circuit breaker; its reads are answered by the other node", async () => {
	const gw = broker("gw", { requestTimeout: 300 });
	const slow = replica("slow", {}, 2000);
	const fast = replica("fast");
	await Promise.all([gw.start(), slow.start(), fast.start()]);
	await settled(gw, 2);
	// Round robin sends half to the slow node: each times out, and is answered by the fast one instead.
	const first = await Promise.all(Array.from({ length: 24 }, () => gw.call("notes.read")));
	expect(first).toEqual(Array(24).fill("fast"));
	const slowEndpoint = (gw.registry as any).getActionEndpoints("notes.read").endpoints.find((e: any) => e.id === "slow");
	expect(slowEndpoint.state).toBe(false);
	// Open: no call reaches the slow node now (counted once the ones it got have finished).
	await delay(2100);
	const sentToSlow = (ran.read ?? []).filter((n) => n === "slow").length;
	expect(sentToSlow).toBeGreaterThanOrEqual(10);
	expect(await Promise.all(Array.from({ length: 10 }, () => gw.call("notes.read")))).toEqual(Array(10).fill("fast"));
	await delay(2100);
	expect((ran.read ?? []).filter((n) => n === "slow").length).toBe(sentToSlow);
});

test("a node announces its services as soon as it has started: a broadcast right after its start reaches it", async () => {
	// Heartbeats far apart: only the start's own announcement can tell the gateway about the new node's services.
	const slow = { heartbeatInterval: 10, heartbeatTimeout: 30 };
	const gw = broker("gw", slow);
	await gw.start();
	const got: string[] = [];
	const a = broker("a", slow);
	a.createService({ name: "cache", events: { "cache.reset": () => void got.push("a") } });
	await a.start();
	// Moleculer's own announcement of new services is debounced by 1 s; this one comes at once.
	const deadline = Date.now() + 500;
	while (!(gw.registry as any).events.getAllEndpoints("cache.reset").some((ep: any) => ep.id === "a")) {
		if (Date.now() > deadline) throw new Error("the gateway does not know a's listener 500 ms after a started");
		await delay(10);
	}
	await gw.broadcast("cache.reset");
	for (const end = Date.now() + 2000; !got.length && Date.now() < end;) await delay(10);
	expect(got).toEqual(["a"]);
});
