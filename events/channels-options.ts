/**
 * The production stream's settings (EVENT_STREAM, STREAM_*: runtime/config.ts) and the @moleculer/channels adapter
 * configuration made of them: the NATS connection, the JetStream stream's limits, the Redis consumer options.
 */
import type { PlatformConfig } from "../runtime/config";
import { NATS_LIVENESS } from "../runtime/transport-watch";

/** Milliseconds as JetStream's nanoseconds (the `nats` package's `nanos`, without loading the client for it). */
export const nanos = (ms: number): number => ms * 1_000_000;

export const CHANGES_CHANNEL = "platform.changes";
/** Request audit entries, in batches (events/audit-shipper.ts); the logger is its one consumer group. */
export const AUDIT_CHANNEL = "platform.audit";

export interface ChannelsStreamOptions {
	kind: "nats" | "redis";
	url: string;
	/** Channel name before the namespace prefix the adapter adds. */
	channel: string;
	ackWaitMs: number;
	retentionHours: number;
	maxMessages: number;
	maxInFlight: number;
	maxRetries: number;
	deadLetter: boolean;
}

export function channelsStreamOptions(cfg: PlatformConfig): ChannelsStreamOptions {
	const kind = cfg.eventStream;
	if (kind !== "nats" && kind !== "redis") throw new Error(`no production event stream for EVENT_STREAM=${kind}`);
	const url = cfg.streamUrl ?? (kind === "nats" ? cfg.transporter : cfg.redisUrl);
	const ok = kind === "nats" ? /^nats:\/\//i.test(url ?? "") : /^rediss?:\/\//i.test(url ?? "");
	if (!url || !ok) throw new Error(`EVENT_STREAM=${kind} needs STREAM_URL or ${kind === "nats" ? "a nats:// TRANSPORTER" : "REDIS_URL"} (got ${url ?? "none"})`);
	return {
		kind,
		url,
		channel: CHANGES_CHANNEL,
		ackWaitMs: cfg.streamAckWaitMs ?? (kind === "nats" ? 10_000 : 30_000),
		retentionHours: cfg.streamRetentionHours ?? 168,
		maxMessages: Math.round(cfg.streamMaxMessages ?? 1_000_000),
		maxInFlight: Math.round(cfg.streamMaxInFlight ?? 1),
		maxRetries: Math.round(cfg.streamMaxRetries ?? 10),
		deadLetter: true,
	};
}

/** `nats://user:pass@h1:4222,nats://h2:4222` → nats.js connection options (the adapter's own parsing drops credentials). */
function natsConnection(url: string): Record<string, unknown> {
	const urls = url.split(",").map((u) => new URL(u.trim()));
	const first = urls[0];
	const auth: Record<string, string> = {};
	if (first.username && first.password) Object.assign(auth, { user: decodeURIComponent(first.username), pass: decodeURIComponent(first.password) });
	else if (first.username) auth.token = decodeURIComponent(first.username);
	return { servers: urls.map((u) => u.host), ...auth, name: "platform-event-stream", maxReconnectAttempts: -1, reconnectTimeWait: 1000, ...NATS_LIVENESS };
}

/** The JetStream stream's limits: events older than STREAM_RETENTION_HOURS or beyond STREAM_MAX_MESSAGES leave it. */
export function streamLimits(o: ChannelsStreamOptions) {
	return { max_age: nanos(o.retentionHours * 3600_000), max_msgs: o.maxMessages, discard: "old" };
}

/** The channels middleware's `adapter` setting. */
export function adapterConfig(o: ChannelsStreamOptions) {
	const common = { maxInFlight: o.maxInFlight, maxRetries: o.maxRetries, deadLettering: { enabled: o.deadLetter, queueName: `${o.channel}.failed` } };
	if (o.kind === "nats")
		return {
			type: "NATS",
			options: {
				...common,
				nats: {
					connectionOptions: natsConnection(o.url),
					streamConfig: streamLimits(o),
				},
			},
		};
	return {
		type: "Redis",
		options: {
			...common,
			redis: { url: o.url, consumerOptions: { startID: "0", minIdleTime: o.ackWaitMs, claimInterval: 1000, processingAttemptsInterval: 1000, readTimeoutInterval: 0 } },
		},
	};
}
