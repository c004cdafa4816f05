/** Every environment setting of the platform, read once. README.md lists them. */
import { randomBytes } from "crypto";
import { accessSync, chmodSync, closeSync, constants, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from "fs";
import path from "path";

/** DATABASE_POOL_SIZE's default. */
export const DEFAULT_DATABASE_POOL_SIZE = 20;
export const DEFAULT_DOC_CACHE_SIZE = 10_000;
/** REQUEST_DB_DEADLINE_MS's default: a request's statement, from asking for a connection to its answer. */
export const DEFAULT_REQUEST_DB_DEADLINE_MS = 5000;

export interface PlatformConfig {
	port: number;
	host: string;
	dataDir: string;
	rootDomain: string;
	rootClientId?: string;
	rootClientSecret?: string;
	rootUsername: string;
	rootPassword?: string;
	transporter?: string;
	/** Services this node runs; undefined = all (one-process default). */
	services?: string[];
	redisUrl?: string;
	databaseUrl?: string;
	/**
	 * DATABASE_POOL_SIZE: most connections a process opens to DATABASE_URL (one pool per process and database, shared
	 * by its stores and workers); default 20. Every node of a deployment has its own: their sum, plus what else uses
	 * the server, must stay under the server's `max_connections` (100 by default).
	 */
	databasePoolSize: number;
	/**
	 * DOC_CACHE_SIZE: documents a process keeps in memory per database for the answers of `get` (stores/doc-cache.ts:
	 * exact across nodes, invalidated by every write's notification); default 10000, 0 turns the cache off.
	 */
	docCacheSize: number;
	/**
	 * REQUEST_DB_DEADLINE_MS: each PostgreSQL statement made for a client's request (its wait for a pooled connection
	 * and its answer together) fails after this, with 503 and Retry-After, and its connection is given up; default
	 * 5000. The workers' statements keep the server's longer limits (runtime/relational.ts, PG_TIMEOUTS).
	 */
	requestDbDeadlineMs: number;
	mqttUrl?: string;
	/** MQTT_TOPIC_ROOT: first level(s) of every MQTT topic the publisher writes (docs/mqtt.md); default `platform`. */
	mqttTopicRoot: string;
	/** MQTT_PORT: port of the embedded broker (no MQTT_URL); 0 = a free port, shared through `preserver.brokerUrl`. */
	mqttPort: number;
	trustProxy: boolean;
	/** CORS_ORIGINS: the exact origins whose pages may call the API (services/api/cors.ts); none by default. */
	corsOrigins: string[];
	logLevel: string;
	/** LOG_FORMAT: `text` (default, one readable line an entry) or `json` (one JSON object a line, for log shippers). */
	logFormat: "text" | "json";
	nodeId?: string;
	/** HEARTBEAT_INTERVAL_MS / HEARTBEAT_TIMEOUT_MS: a node silent this long is dropped by its peers (docs/production.md, "Failover"). */
	heartbeatIntervalMs: number;
	heartbeatTimeoutMs: number;
	/** REQUEST_TIMEOUT_MS: a call unanswered this long fails with 504 (a slow action; dead nodes are dropped sooner). */
	requestTimeoutMs: number;
	/** FAILOVER_WAIT_MS: how long a call that found no node of its service keeps waiting for one (a restart). */
	failoverWaitMs: number;
	/** Moleculer namespace: nodes on one transporter see each other only within the same namespace. */
	namespace: string;
	/** Prefix of every key this node writes to Redis (several deployments or test runs on one Redis). */
	redisPrefix?: string;
	/**
	 * Serve /status and /metrics on each domain's and worker's own spec port. Undefined = automatic: on when the
	 * node runs without the gateway (SERVICES without `api`), off in the one-process default.
	 */
	servicePorts?: boolean;
	/** Added to every spec port of the ops listeners (tests, or several nodes on one host). */
	opsPortOffset: number;
	/**
	 * EVENT_STREAM: how change events reach the workers. `outbox` (default): workers read the persisted outbox
	 * directly (one process or one node per worker kind). `nats` (JetStream) / `redis` (Streams): through
	 * @moleculer/channels, fed by the relay on the domain nodes; instances of a worker share the load.
	 */
	eventStream: "outbox" | "nats" | "redis";
	/** STREAM_URL: server of the production stream; default TRANSPORTER (nats) or REDIS_URL (redis). */
	streamUrl?: string;
	/** STREAM_ACK_WAIT_MS: an unacknowledged event is redelivered after this; default 10 s (NATS), 30 s (Redis). */
	streamAckWaitMs?: number;
	/** STREAM_RETENTION_HOURS: events older than this leave the NATS stream, acknowledged or not; default 168. */
	streamRetentionHours?: number;
	/** STREAM_MAX_MESSAGES: the stream keeps at most this many events (oldest go first); default 1,000,000. */
	streamMaxMessages?: number;
	/** STREAM_MAX_IN_FLIGHT: events of one group handled at once (NATS: whole group; Redis: per instance); default 1 (in order). */
	streamMaxInFlight?: number;
	/** STREAM_MAX_RETRIES: deliveries of an event before it moves to the dead-letter stream; default 10. */
	streamMaxRetries?: number;
	/** RELAY_SETTLE_MS: the relay publishes an outbox record once it is this old; default 0 (positions follow commit order). */
	relaySettleMs?: number;
	/** CLEANER_CRON: when the cleaner runs (node-cron syntax; default every 10 minutes). */
	cleanerCron: string;
	/** RETENTION_DAYS: days a soft-deleted document is kept before the cleaner removes it (default 30). */
	retentionDays: number;
	/**
	 * RETENTION_<SERVICE>_<COLLECTION>_DAYS overrides, keyed `<SERVICE>_<COLLECTION>` (upper case, `-` as `_`).
	 * Built in: IDENTITY_SESSIONS = 0 (a session record goes at the next pass after logout).
	 */
	retentionOverrides: Record<string, number>;
	/** AUDIT_RETENTION_DAYS: days audit entries are kept (default 90). */
	auditRetentionDays: number;
	/** DELIVERY_RETENTION_DAYS: days finished webhook delivery records are kept (default 30). */
	deliveryRetentionDays: number;
	/** WEBHOOK_ALLOW_PRIVATE=1: the dispatcher may deliver to loopback, private and link-local addresses (tests, labs). */
	webhookAllowPrivate: boolean;
	/** WEBHOOK_RETRY_SCHEDULE: seconds before each delivery attempt (first is usually 0); its length is the attempt count. */
	webhookRetrySchedule: number[];
	/** TOUCH_LEASE_MS: how long a publisher holds a message it is sending before another may take it over (default 60 s). */
	touchLeaseMs?: number;
	/** OUTBOX_GRACE_MS: how long an event every consumer group has passed stays in the outbox (readers that tail it). */
	outboxGraceMs?: number;
	/**
	 * STREAM_POSITION_TTL_MS: a consumer position of another namespace (a relay's, or an embedded consumer group's) that
	 * is not renewed for this long no longer holds outbox records back; default 1 h (docs/production.md).
	 */
	streamPositionTtlMs?: number;
	/** TOKEN_LEEWAY_SECONDS: how far in the future a token's `iat`/`nbf` may be (clock skew between nodes); default 60. */
	tokenLeewaySec?: number;
	/** CURSOR_IDLE_MS: a `/cursor` stream whose client reads nothing (no 'drain') for this long is closed; default 30 s. */
	cursorIdleMs: number;
	/** RATE_LIMIT (`<n>/s[,<burst>]`): requests per principal (per IP unauthenticated); undefined = off (default). */
	rateLimit?: RateLimit;
	/** METRICS_TOKEN: when set, `/metrics` (gateway and ops ports) answers only `Authorization: Bearer <it>`; unset = open. */
	metricsToken?: string;
	/** SMTP_URL: `smtp(s)://user:pass@host:port` of the mail relay (pooled); unset = emails fail with `no transport`. Never logged. */
	smtpUrl?: string;
	/** VAPID_PUBLIC_KEY / VAPID_PRIVATE_KEY (base64url): unset = generated once and kept in DATA_DIR/vapid.json (0600). */
	vapidPublicKey?: string;
	vapidPrivateKey?: string;
	/** VAPID_SUBJECT: `mailto:` or `https:` contact of the push sender; default `mailto:operator@<PLATFORM_ROOT_DOMAIN>`. */
	vapidSubject?: string;
	/** SMS_<PROVIDER>_URL / _KEY / _FROM: platform-wide SMS provider credentials (a tenant's `SMS` config entry wins). */
	smsProviders: Record<string, { url?: string; key?: string; from?: string }>;
	/** TLS_CA_FILE: PEM file of extra CA certificates trusted (besides the default ones) by outbound push and SMS requests. */
	tlsCaFile?: string;
	/** TOUCH_RETRY_SCHEDULE: seconds before each delivery attempt of an email, SMS or push (its length is the attempt count). */
	touchRetrySchedule: number[];
	/** TOUCH_EMAIL_SENDERS: addresses (`noreply@platform.example`) or domains any tenant's email may have as `From`, besides the tenant's own domains; default none. */
	touchEmailSenders: string[];
	/** FILE_MAX_BYTES: largest file an upload accepts (413 above); default 8 MiB (docs/files.md). */
	fileMaxBytes: number;
	/** FILE_ORPHAN_GRACE_MINUTES: a stored blob without a file record is removed by the cleaner once this old; default 60. */
	fileOrphanGraceMinutes: number;
	/** S3_URL / S3_BUCKET / S3_ACCESS_KEY / S3_SECRET_KEY / S3_REGION: file content in S3-compatible storage; unset = DATA_DIR/files. */
	s3?: { url: string; bucket: string; accessKey?: string; secretKey?: string; region: string };
}

export interface RateLimit {
	/** Requests a second (the bucket's refill rate). */
	rate: number;
	/** Bucket size: requests that may come at once; default the rate of one second. */
	burst: number;
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

/** A setting, unset when empty; from `<NAME>_FILE` (trailing newlines dropped) for FILE_SETTINGS, never from both. */
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

function env(k: string): string | undefined {
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

export function ensureDir(dir: string): string {
	if (!existsSync(dir)) mkdirSync(dir, { recursive: true });
	return dir;
}

/**
 * A directory of DATA_DIR: its owner's only (0700), created so or narrowed when it exists. One exception
 * (`keepSearch`, for what may be DATA_DIR itself): as root the embedded PostgreSQL runs as its own system user, which
 * must pass through DATA_DIR to its data directory; runtime/relational.ts gives DATA_DIR that user's group with search
 * only (0710), and this keeps it while the group is the one of DATA_DIR/postgres (never for others: no `o` bit stays).
 */
export function ensurePrivateDir(dir: string, keepSearch = false): string {
	if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
	try {
		const st = statSync(dir);
		const want = keepSearch && groupIsEmbeddedServers(dir, st.gid) ? 0o710 : 0o700;
		if ((st.mode & 0o777) !== want) chmodSync(dir, want);
	} catch {
		/* not ours to change (another owner): left as is */
	}
	return dir;
}

/** Running as root, `gid` (not root's) is the group of `dir`/postgres, the embedded PostgreSQL's data directory. */
function groupIsEmbeddedServers(dir: string, gid: number): boolean {
	if (gid === 0 || typeof process.getuid !== "function" || process.getuid() !== 0) return false;
	try {
		return statSync(path.join(dir, "postgres")).gid === gid;
	} catch {
		return false;
	}
}

/**
 * DATA_DIR made its owner's only at start, also when an earlier version left it readable or searchable by others: the
 * directory (above), every file 0600 and every sub-directory 0700, except the embedded PostgreSQL's data directory
 * (initdb's own 0700).
 */
export function privateDataDir(dir: string): void {
	writableDataDir(dir);
	const walk = (d: string, depth: number) => {
		for (const e of readdirSync(d, { withFileTypes: true })) {
			const p = path.join(d, e.name);
			try {
				if (e.isDirectory()) {
					if (depth === 0 && e.name === "postgres") continue;
					ensurePrivateDir(p);
					if (depth < 4) walk(p, depth + 1);
				} else if (e.isFile() && statSync(p).mode & 0o077) chmodSync(p, 0o600);
			} catch {
				/* gone meanwhile, or not ours */
			}
		}
	};
	walk(dir, 0);
}

/** A setting this node cannot start with: start.ts prints its message alone (what to change), without a stack trace. */
/** A start refused for a reason the operator fixes (a setting, a busy port): its message is all there is to say, no stack. */
export class StartupError extends Error {
	constructor(message: string) {
		super(message);
		this.name = "StartupError";
		this.stack = `StartupError: ${message}`;
	}
}

/**
 * DATA_DIR created (0700) or found, and writable by this user; otherwise a StartupError saying what to do. The case
 * this guards: an image run as an unprivileged user over a root-owned app directory, without a volume for DATA_DIR.
 */
function writableDataDir(dir: string): void {
	try {
		ensurePrivateDir(dir, true);
		accessSync(dir, constants.W_OK | constants.X_OK);
	} catch (err) {
		const e = err as NodeJS.ErrnoException;
		const who = typeof process.getuid === "function" ? ` (uid ${process.getuid()})` : "";
		throw new StartupError(
			`DATA_DIR ${dir} cannot be created or written by this user${who}: ${e.code ?? e.message}. ` +
				`Set DATA_DIR to a directory this user may write (in the image: the volume at /data), or give this user that directory`,
		);
	}
}

/**
 * A JSON file readable by its owner only (bootstrap values, generated keys, the embedded PostgreSQL's password),
 * replaced whole: written to a file of its own beside it, flushed to disk, then renamed over it. A reader (another
 * process, the platform's next start after a crash mid-write) sees the old content or the new, never a truncated file
 * that would leave the keys or the root credentials unreadable.
 */
export function writePrivateJson(file: string, value: unknown): void {
	ensurePrivateDir(path.dirname(file), true);
	const tmp = `${file}.${process.pid}.tmp`;
	try {
		const fd = openSync(tmp, "w", 0o600);
		try {
			writeSync(fd, JSON.stringify(value, null, 2));
			fsyncSync(fd);
		} finally {
			closeSync(fd);
		}
		chmodSync(tmp, 0o600);
		renameSync(tmp, file);
	} catch (err) {
		rmSync(tmp, { force: true });
		throw err;
	}
}

export function readJson<T>(file: string): T | undefined {
	return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as T) : undefined;
}

export interface Keys {
	jwtSecret: string;
	aesSecret: string;
}

/**
 * JWT_SECRET and AES_SECRET: from the environment, else generated once and kept in DATA_DIR/keys.json (0600) so
 * that restarts keep tokens and encrypted values valid. Nodes of one deployment must share them (set the env).
 */
export function loadKeys(cfg: PlatformConfig): Keys {
	const file = path.join(cfg.dataDir, "keys.json");
	const stored = readJson<Partial<Keys>>(file) ?? {};
	const keys: Keys = {
		jwtSecret: env("JWT_SECRET") ?? stored.jwtSecret ?? randomBytes(32).toString("base64url"),
		aesSecret: env("AES_SECRET") ?? stored.aesSecret ?? randomBytes(32).toString("base64url"),
	};
	if ((stored.jwtSecret !== keys.jwtSecret && !env("JWT_SECRET")) || (stored.aesSecret !== keys.aesSecret && !env("AES_SECRET")))
		writePrivateJson(file, { jwtSecret: env("JWT_SECRET") ? stored.jwtSecret : keys.jwtSecret, aesSecret: env("AES_SECRET") ? stored.aesSecret : keys.aesSecret });
	return keys;
}

const byBroker = new WeakMap<object, PlatformConfig>();

/**
 * Binds the configuration a node was built with to its broker (platform.ts nodeOptions does, when the broker is
 * created); tests start several nodes in one process, each with its own.
 */
export function bindConfig(broker: object, cfg: PlatformConfig): void {
	byBroker.set(broker, cfg);
}

/**
 * The configuration bound to `broker`. Never read again from the environment here: a node built outside the
 * composition root would otherwise run with settings nobody gave it.
 */
export function configOf(broker: object): PlatformConfig {
	const cfg = byBroker.get(broker);
	if (!cfg) throw new Error("this broker has no platform configuration: build its options with nodeOptions(cfg) (platform.ts)");
	return cfg;
}
