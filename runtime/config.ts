/**
 * Every environment setting of the platform, read once (README.md lists them), and the configuration a node was built
 * with. The entry of three parts: the environment's parsing (config-env.ts), DATA_DIR's files (config-files.ts) and
 * the secrets (config-keys.ts).
 */
export {
	checkDocumentStore,
	corsOrigins,
	DEFAULT_DATABASE_POOL_SIZE,
	DEFAULT_DOC_CACHE_SIZE,
	DEFAULT_REQUEST_DB_DEADLINE_MS,
	DEFAULT_RETRY_SCHEDULE,
	DEFAULT_TOUCH_RETRY_SCHEDULE,
	metricsToken,
	rateLimit,
	readConfig,
	retrySchedule,
	SMS_PROVIDERS,
	StartupError,
} from "./config-env";
export { ensureDir, ensurePrivateDir, privateDataDir, readJson, writePrivateJson } from "./config-files";
export { loadKeys, type Keys } from "./config-keys";

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
