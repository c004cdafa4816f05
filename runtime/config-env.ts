/**
 * The environment read into a PlatformConfig: each setting's parsing and its refusal (a StartupError or an Error that
 * names the setting), `<NAME>_FILE` for the secrets. README.md lists the settings; runtime/config.ts is the entry.
 */
import { readFileSync } from "fs";
import path from "path";
import type { PlatformConfig, RateLimit } from "./config";

/** DATABASE_POOL_SIZE's default. */
export const DEFAULT_DATABASE_POOL_SIZE = 20;
/** DOC_CACHE_SIZE's default: documents kept per process and database (stores/doc-cache.ts). */
export const DEFAULT_DOC_CACHE_SIZE = 10_000;
/** REQUEST_DB_DEADLINE_MS's default: a request's statement, from asking for a connection to its answer. */
export const DEFAULT_REQUEST_DB_DEADLINE_MS = 5000;

/** A start refused for a reason the operator fixes (a setting, a busy port): its message is all there is to say, no stack. */
export class StartupError extends Error {
	constructor(message: string) {
		super(message);
		this.name = "StartupError";
		this.stack = `StartupError: ${message}`;
	}
}

/**
 * RATE_LIMIT: `50/s` (50 requests a second, bursts of 50), `50/s,200` (bursts of 200); `/m` and `/h` for a minute
 * or an hour. Unset or `off`: no limit. Anything else refuses to start.
 */
export function rateLimit(v: string | undefined): RateLimit | undefined {
	if (v === undefined || v.toLowerCase() === "off") return undefined;
	const m = /^\s*(\d+(?:\.\d+)?)\s*\/\s*(s|m|h)\s*(?:,\s*(\d+)\s*)?$/i.exec(v);
	const per = m ? { s: 1, m: 60, h: 3600 }[m[2].toLowerCase() as "s" | "m" | "h"] : 0;
	const rate = m ? Number(m[1]) / per : NaN;
	const burst = m?.[3] !== undefined ? Number(m[3]) : Math.max(1, Math.ceil(m ? Number(m[1]) : 0));
	if (!m || !(rate > 0) || !Number.isFinite(rate) || !Number.isInteger(burst) || burst < 1 || burst > 1e9)
		throw new Error(`RATE_LIMIT must be <requests>/s (or /m, /h) with an optional ,<burst>, e.g. 50/s,200, got ${v}`);
	return { rate, burst };
}

/** METRICS_TOKEN: at least 16 characters, no whitespace (it travels as a bearer); anything else refuses to start. */
export function metricsToken(v: string | undefined): string | undefined {
	if (v === undefined) return undefined;
	if (v.length < 16 || /\s/.test(v)) throw new Error("METRICS_TOKEN must be at least 16 characters without whitespace");
	return v;
}

function nonNegativeInt(name: string, v: string): number {
	const n = Number(v);
	if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${v}`);
	return n;
}

function cursorIdle(v: string | undefined): number {
	if (v === undefined) return 30_000;
	const n = Number(v);
	if (!Number.isInteger(n) || n < 1) throw new Error(`CURSOR_IDLE_MS must be a positive integer of milliseconds, got ${v}`);
	return n;
}

/**
 * The settings that may instead name a file holding their value, `<NAME>_FILE` (a compose or Kubernetes secret under
 * /run/secrets): the secrets, and the VAPID public key that goes with its private one. Not the root client's secret
 * and password: auth prints the generated ones unless they are in the environment.
 */
const FILE_SETTINGS = new Set([
	"JWT_SECRET",
	"AES_SECRET",
	"DATABASE_URL",
	"METRICS_TOKEN",
	"MONGO_URI",
	"REDIS_URL",
	"TRANSPORTER",
	"STREAM_URL",
	"MQTT_URL",
	"SMTP_URL",
	"VAPID_PUBLIC_KEY",
	"VAPID_PRIVATE_KEY",
	"S3_SECRET_KEY",
	"SMS_KAVENEGAR_KEY",
	"SMS_TWILIO_KEY",
]);

const ORIGIN = /^https?:\/\/[^/?#\s]+$/i;

/** CORS_ORIGINS: comma-separated exact origins, each `http(s)://host[:port]` without a path, in the form browsers send. */
export function corsOrigins(v: string | undefined): string[] {
	if (!v || !v.trim()) return [];
	return v
		.split(",")
		.map((o) => o.trim())
		.filter(Boolean)
		.map((o) => {
			if (!ORIGIN.test(o)) throw new StartupError(`CORS_ORIGINS takes exact origins such as https://app.example.com or http://localhost:5173, got ${o}`);
			// Scheme and host in lower case, a default port dropped: as a browser's Origin header has them.
			return new URL(o).origin;
		});
}

function logFormat(v: string | undefined): "text" | "json" {
	if (v === undefined || v === "text" || v === "json") return v ?? "text";
	throw new StartupError(`LOG_FORMAT must be text or json, got ${v}`);
}

/** A setting, unset when empty; from `<NAME>_FILE` (trailing newlines dropped) for FILE_SETTINGS, never from both. */
export function env(k: string): string | undefined {
	const file = FILE_SETTINGS.has(k) ? process.env[`${k}_FILE`] : undefined;
	let v = process.env[k];
	if (file && v) throw new StartupError(`${k} and ${k}_FILE are both set: keep one`);
	if (file) {
		try {
			v = readFileSync(file, "utf8").replace(/[\r\n]+$/, "");
		} catch (err) {
			throw new StartupError(`${k}_FILE ${file} cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
		}
	}
	return v === undefined || v === "" ? undefined : v;
}

/** `1/true/yes` → true, `0/false/no` → false, unset → undefined (the setting's automatic behaviour). */
function flag(name: string): boolean | undefined {
	const v = env(name);
	if (v === undefined) return undefined;
	const l = v.toLowerCase();
	if (["1", "true", "yes"].includes(l)) return true;
	if (["0", "false", "no"].includes(l)) return false;
	throw new Error(`${name} must be 1/0, true/false or yes/no, got ${v}`);
}

function portOffset(v: string | undefined): number {
	const n = Number(v ?? 0);
	if (!Number.isInteger(n) || n < 0 || n > 60000) throw new Error(`OPS_PORT_OFFSET must be an integer from 0 to 60000, got ${v}`);
	return n;
}

/** Immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: eight attempts over about 28 hours. */
export const DEFAULT_RETRY_SCHEDULE = [0, 5, 300, 1800, 7200, 18000, 36000, 36000];

/** Communications: immediately, 10 s, 1 min, 5 min, 30 min, 2 h: six attempts over about 2.6 hours. */
export const DEFAULT_TOUCH_RETRY_SCHEDULE = [0, 10, 60, 300, 1800, 7200];

export function retrySchedule(v: string | undefined, fallback: readonly number[] = DEFAULT_RETRY_SCHEDULE, name = "WEBHOOK_RETRY_SCHEDULE"): number[] {
	if (v === undefined) return [...fallback];
	const list = v.split(",").map((x) => x.trim());
	const nums = list.map(Number);
	if (!list.length || list.some((x) => x === "") || nums.some((n) => !Number.isFinite(n) || n < 0))
		throw new Error(`${name} must be comma-separated non-negative seconds, got ${v}`);
	return nums;
}

/** A retention in days: a non-negative number (fractions allowed). */
function days(name: string, fallback: number): number {
	const v = env(name);
	if (v === undefined) return fallback;
	const n = Number(v);
	if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number of days, got ${v}`);
	return n;
}

/** Per-collection retentions: the built-in ones, then every RETENTION_<SERVICE>_<COLLECTION>_DAYS of the environment. */
function retentionOverrides(): Record<string, number> {
	const out: Record<string, number> = { IDENTITY_SESSIONS: 0 };
	for (const k of Object.keys(process.env)) {
		const m = /^RETENTION_([A-Z0-9_]+)_DAYS$/.exec(k);
		if (m && env(k) !== undefined) out[m[1]] = days(k, 0);
	}
	return out;
}

function topicRoot(v: string | undefined): string {
	const root = v ?? "platform";
	if (root.length > 200 || root.startsWith("$") || root.split("/").some((l) => !l || /[+#\u0000]/.test(l)))
		throw new Error(`MQTT_TOPIC_ROOT must be literal topic levels (no wildcard, no empty level, no leading $), got ${v}`);
	return root;
}

/**
 * Documents live in PostgreSQL only (docs/decisions.md, "One document store"). DOCUMENT_STORE may still say `postgres`
 * (deployments set it while it chose); a setting that asks for a store that is not offered any more answers a
 * StartupError saying what to do instead, rather than starting on something else.
 */
export function checkDocumentStore(): void {
	const v = env("DOCUMENT_STORE");
	if (v !== undefined && v.toLowerCase() !== "postgres")
		throw new StartupError(
			v.toLowerCase() === "nedb"
				? "DOCUMENT_STORE=nedb: the NeDB store is not offered any more; documents live in PostgreSQL (DATABASE_URL, else embedded under DATA_DIR). Unset DOCUMENT_STORE; a DATA_DIR of NeDB files moves with `npm run migrate-store`"
				: `DOCUMENT_STORE must be postgres (or unset), got ${v}`,
		);
	if (env("MONGO_URI") !== undefined)
		throw new StartupError(
			"MONGO_URI is set: the MongoDB store is not offered any more; documents live in PostgreSQL (DATABASE_URL, else embedded under DATA_DIR). Unset MONGO_URI",
		);
}

function eventStream(v: string | undefined): PlatformConfig["eventStream"] {
	const k = (v ?? "outbox").toLowerCase();
	if (k !== "outbox" && k !== "nats" && k !== "redis") throw new Error(`EVENT_STREAM must be outbox, nats or redis, got ${v}`);
	return k;
}

/** An optional positive number (unset = the consumer's own default). */
function positive(name: string): number | undefined {
	const v = env(name);
	if (v === undefined) return undefined;
	const n = Number(v);
	if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got ${v}`);
	return n;
}

/** A peer must miss at least two heartbeats (each up to 500 ms late by Moleculer's jitter) before it is dropped. */
function heartbeats(): Pick<PlatformConfig, "heartbeatIntervalMs" | "heartbeatTimeoutMs"> {
	const heartbeatIntervalMs = millis("HEARTBEAT_INTERVAL_MS", 1000, 1000);
	const heartbeatTimeoutMs = millis("HEARTBEAT_TIMEOUT_MS", Math.max(3000, 2 * heartbeatIntervalMs + 1000), 1000);
	if (heartbeatTimeoutMs < 2 * heartbeatIntervalMs + 1000)
		throw new Error(`HEARTBEAT_TIMEOUT_MS must be at least twice HEARTBEAT_INTERVAL_MS plus 1000 (${2 * heartbeatIntervalMs + 1000}), got ${heartbeatTimeoutMs}`);
	return { heartbeatIntervalMs, heartbeatTimeoutMs };
}

/** A whole number, at least `min` (`unit` names what it counts in the refusal). */
function atLeast(name: string, fallback: number, min: number, unit = ""): number {
	const v = env(name);
	if (v === undefined) return fallback;
	const n = Number(v);
	if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer${unit}, at least ${min}, got ${v}`);
	return n;
}

/** A duration in whole milliseconds, at least `min`. */
function millis(name: string, fallback: number, min: number): number {
	return atLeast(name, fallback, min, " of milliseconds");
}

function mqttPort(v: string | undefined): number {
	const n = Number(v ?? 0);
	if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`MQTT_PORT must be an integer from 0 to 65535, got ${v}`);
	return n;
}

/** The root user's username has the form of every username (docs/contracts.md "Tenants"). */
function rootUsername(v: string | undefined): string {
	const u = v ?? "root";
	if (!/^[a-z0-9][a-z0-9._-]{2,63}$/.test(u) || /^[0-9a-f]{24}$/.test(u))
		throw new Error(`PLATFORM_ROOT_USERNAME must match ^[a-z0-9][a-z0-9._-]{2,63}$ and not be a 24-hex id, got ${v}`);
	return u;
}

export const SMS_PROVIDERS = ["kavenegar", "twilio"] as const;

function smsProviders(): PlatformConfig["smsProviders"] {
	const out: PlatformConfig["smsProviders"] = {};
	for (const p of SMS_PROVIDERS) {
		const P = p.toUpperCase();
		const entry = { url: env(`SMS_${P}_URL`), key: env(`SMS_${P}_KEY`), from: env(`SMS_${P}_FROM`) };
		if (entry.url || entry.key) out[p] = entry;
	}
	return out;
}

/** TOUCH_EMAIL_SENDERS: comma-separated addresses or domains, lower-cased; anything else refuses to start. */
function emailSenders(v: string | undefined): string[] {
	const list = (v ?? "")
		.split(",")
		.map((x) => x.trim().toLowerCase())
		.filter(Boolean);
	for (const x of list) if (!/^([^@\s,<>]+@)?[a-z0-9-]+(\.[a-z0-9-]+)*$/.test(x)) throw new Error(`TOUCH_EMAIL_SENDERS must be comma-separated addresses or domains, got ${x}`);
	return list;
}

export function readConfig(): PlatformConfig {
	checkDocumentStore();
	const services = env("SERVICES");
	const dataDir = path.resolve(env("DATA_DIR") ?? "./data");
	return {
		port: Number(env("PORT") ?? 3010),
		host: env("HOST") ?? "127.0.0.1",
		dataDir,
		rootDomain: env("PLATFORM_ROOT_DOMAIN") ?? "root.local",
		rootClientId: env("PLATFORM_ROOT_CLIENT_ID"),
		rootClientSecret: env("PLATFORM_ROOT_CLIENT_SECRET"),
		rootUsername: rootUsername(env("PLATFORM_ROOT_USERNAME")),
		rootPassword: env("PLATFORM_ROOT_PASSWORD"),
		transporter: env("TRANSPORTER"),
		services: services
			? services
					.split(",")
					.map((s) => s.trim())
					.filter(Boolean)
			: undefined,
		redisUrl: env("REDIS_URL"),
		databaseUrl: env("DATABASE_URL"),
		databasePoolSize: atLeast("DATABASE_POOL_SIZE", DEFAULT_DATABASE_POOL_SIZE, 1),
		docCacheSize: atLeast("DOC_CACHE_SIZE", DEFAULT_DOC_CACHE_SIZE, 0),
		requestDbDeadlineMs: millis("REQUEST_DB_DEADLINE_MS", DEFAULT_REQUEST_DB_DEADLINE_MS, 100),
		mqttUrl: env("MQTT_URL"),
		mqttTopicRoot: topicRoot(env("MQTT_TOPIC_ROOT")),
		mqttPort: mqttPort(env("MQTT_PORT")),
		trustProxy: ["1", "true", "yes"].includes((env("TRUST_PROXY") ?? "").toLowerCase()),
		corsOrigins: corsOrigins(env("CORS_ORIGINS")),
		logLevel: env("LOG_LEVEL") ?? "info",
		logFormat: logFormat(env("LOG_FORMAT")),
		nodeId: env("NODE_ID"),
		...heartbeats(),
		requestTimeoutMs: millis("REQUEST_TIMEOUT_MS", 30_000, 100),
		failoverWaitMs: millis("FAILOVER_WAIT_MS", 5000, 0),
		namespace: env("NAMESPACE") ?? "platform",
		redisPrefix: env("REDIS_PREFIX"),
		servicePorts: flag("SERVICE_PORTS"),
		opsPortOffset: portOffset(env("OPS_PORT_OFFSET")),
		eventStream: eventStream(env("EVENT_STREAM")),
		streamUrl: env("STREAM_URL"),
		streamAckWaitMs: positive("STREAM_ACK_WAIT_MS"),
		streamRetentionHours: positive("STREAM_RETENTION_HOURS"),
		streamMaxMessages: positive("STREAM_MAX_MESSAGES"),
		streamMaxInFlight: positive("STREAM_MAX_IN_FLIGHT"),
		streamMaxRetries: positive("STREAM_MAX_RETRIES"),
		relaySettleMs: env("RELAY_SETTLE_MS") === undefined ? undefined : Math.max(0, Number(env("RELAY_SETTLE_MS")) || 0),
		cleanerCron: env("CLEANER_CRON") ?? "*/10 * * * *",
		retentionDays: days("RETENTION_DAYS", 30),
		retentionOverrides: retentionOverrides(),
		auditRetentionDays: days("AUDIT_RETENTION_DAYS", 90),
		deliveryRetentionDays: days("DELIVERY_RETENTION_DAYS", 30),
		webhookAllowPrivate: flag("WEBHOOK_ALLOW_PRIVATE") ?? false,
		webhookRetrySchedule: retrySchedule(env("WEBHOOK_RETRY_SCHEDULE")),
		cursorIdleMs: cursorIdle(env("CURSOR_IDLE_MS")),
		outboxGraceMs: env("OUTBOX_GRACE_MS") === undefined ? undefined : nonNegativeInt("OUTBOX_GRACE_MS", env("OUTBOX_GRACE_MS")!),
		streamPositionTtlMs: env("STREAM_POSITION_TTL_MS") === undefined ? undefined : millis("STREAM_POSITION_TTL_MS", 0, 1000),
		tokenLeewaySec: env("TOKEN_LEEWAY_SECONDS") === undefined ? undefined : nonNegativeInt("TOKEN_LEEWAY_SECONDS", env("TOKEN_LEEWAY_SECONDS")!),
		rateLimit: rateLimit(env("RATE_LIMIT")),
		metricsToken: metricsToken(env("METRICS_TOKEN")),
		smtpUrl: env("SMTP_URL"),
		vapidPublicKey: env("VAPID_PUBLIC_KEY"),
		vapidPrivateKey: env("VAPID_PRIVATE_KEY"),
		vapidSubject: env("VAPID_SUBJECT"),
		smsProviders: smsProviders(),
		tlsCaFile: env("TLS_CA_FILE"),
		touchRetrySchedule: retrySchedule(env("TOUCH_RETRY_SCHEDULE"), DEFAULT_TOUCH_RETRY_SCHEDULE, "TOUCH_RETRY_SCHEDULE"),
		touchLeaseMs: env("TOUCH_LEASE_MS") === undefined ? undefined : nonNegativeInt("TOUCH_LEASE_MS", env("TOUCH_LEASE_MS")!),
		touchEmailSenders: emailSenders(env("TOUCH_EMAIL_SENDERS")),
		fileMaxBytes: Math.floor(positive("FILE_MAX_BYTES") ?? 8 * 1024 * 1024),
		fileOrphanGraceMinutes: positive("FILE_ORPHAN_GRACE_MINUTES") ?? 60,
		s3: s3Settings(),
	};
}

/** S3_URL and S3_BUCKET together choose S3-compatible storage for file content; one without the other refuses to start. */
function s3Settings(): PlatformConfig["s3"] {
	const url = env("S3_URL");
	const bucket = env("S3_BUCKET");
	if (!url && !bucket) return undefined;
	if (!url || !bucket) throw new Error("S3_URL and S3_BUCKET must be set together");
	return { url, bucket, accessKey: env("S3_ACCESS_KEY"), secretKey: env("S3_SECRET_KEY"), region: env("S3_REGION") ?? "us-east-1" };
}
