/**
 * Clock skew between nodes, as the gauge `platform_clock_skew_seconds{peer}`: how far each peer's clock is ahead of
 * this node's (negative: behind). Measured with Moleculer's PING/PONG, which carries the peer's time: the difference
 * is taken at the middle of the round trip, so the network delay does not count. Each node pings its peers when they
 * join and every SKEW_PING_MS, and takes every PONG it gets as a measurement; a peer that leaves loses its series. A skew beyond SKEW_WARN_SEC is logged once per peer
 * (until it comes back within): tokens issued by a node whose clock runs ahead are refused elsewhere as `token not
 * yet valid` beyond TOKEN_LEEWAY_SECONDS, and a gateway whose clock runs ahead takes tokens for expired.
 */
import type { ServiceBroker } from "moleculer";

export const CLOCK_SKEW = "platform.clock.skew.seconds";
const SKEW_PING_MS = 30_000;
const PING_TIMEOUT_MS = 2_000;
const SKEW_WARN_SEC = 10;

/** What is used of Moleculer's gauge (0.14): its series by label hash. */
interface Series {
	values: Map<string, unknown>;
	hashingLabels(labels: object): string;
	changed(): void;
}

interface Pong {
	nodeID: string;
	elapsedTime: number;
	/** This node's time minus the peer's, in ms (Moleculer's transit). */
	timeDiff: number;
}

/** Starts measuring once the broker has started; stops with it. Needs metrics and a transporter (else: nothing to do). */
export function watchClockSkew(broker: ServiceBroker): void {
	if (!broker.isMetricsEnabled()) return;
	const gauge = broker.metrics.register({
		type: "gauge",
		name: CLOCK_SKEW,
		labelNames: ["peer"],
		unit: "seconds",
		description: "How far a peer's clock is ahead of this node's (negative: behind)",
	}) as unknown as Series | null;
	let timer: NodeJS.Timeout | undefined;
	const warned = new Set<string>();
	const record = (pong: Pong | null) => {
		if (!pong || pong.nodeID === broker.nodeID) return;
		const skew = -pong.timeDiff / 1000;
		broker.metrics.set(CLOCK_SKEW, skew, { peer: pong.nodeID });
		if (Math.abs(skew) < SKEW_WARN_SEC) warned.delete(pong.nodeID);
		else if (!warned.has(pong.nodeID)) {
			warned.add(pong.nodeID);
			broker.logger.warn(`clock of node ${pong.nodeID} is ${Math.abs(skew).toFixed(1)} s ${skew > 0 ? "ahead of" : "behind"} this node's: synchronise the clocks (NTP)`);
		}
	};
	// Every PONG this node gets is a measurement: its own pings, and any other (the REPL's `ping`).
	const bus = broker.localBus;
	bus.on("$node.pong", record);
	const ping = (nodeID?: string) => {
		if (broker.transit?.connected) void broker.ping(nodeID as string, PING_TIMEOUT_MS).catch(() => undefined);
	};
	bus.on("$broker.started", () => {
		if (!broker.transit) return;
		timer = setInterval(ping, SKEW_PING_MS);
		timer.unref();
		ping();
	});
	bus.on("$node.connected", ({ node }: { node: { id: string } }) => {
		if (node.id !== broker.nodeID) ping(node.id);
	});
	bus.on("$node.disconnected", ({ node }: { node: { id: string } }) => {
		warned.delete(node.id);
		if (gauge?.values.delete(gauge.hashingLabels({ peer: node.id }))) gauge.changed();
	});
	bus.on("$broker.stopped", () => clearInterval(timer));
}
