/** Every environment setting of the platform, read once. README.md lists them. */
import { randomBytes } from "crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "fs";
import path from "path";

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
	mongoUri?: string;
	redisUrl?: string;
	databaseUrl?: string;
	mqttUrl?: string;
	trustProxy: boolean;
	logLevel: string;
	nodeId?: string;
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
}

const env = (k: string): string | undefined => {
	const v = process.env[k];
	return v === undefined || v === "" ? undefined : v;
};

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

export function readConfig(): PlatformConfig {
	const services = env("SERVICES");
	return {
		port: Number(env("PORT") ?? 3010),
		host: env("HOST") ?? "127.0.0.1",
		dataDir: path.resolve(env("DATA_DIR") ?? "./data"),
		rootDomain: env("PLATFORM_ROOT_DOMAIN") ?? "root.local",
		rootClientId: env("PLATFORM_ROOT_CLIENT_ID"),
		rootClientSecret: env("PLATFORM_ROOT_CLIENT_SECRET"),
		rootUsername: env("PLATFORM_ROOT_USERNAME") ?? "root",
		rootPassword: env("PLATFORM_ROOT_PASSWORD"),
		transporter: env("TRANSPORTER"),
		services: services ? services.split(",").map((s) => s.trim()).filter(Boolean) : undefined,
		mongoUri: env("MONGO_URI"),
		redisUrl: env("REDIS_URL"),
		databaseUrl: env("DATABASE_URL"),
		mqttUrl: env("MQTT_URL"),
		trustProxy: ["1", "true", "yes"].includes((env("TRUST_PROXY") ?? "").toLowerCase()),
		logLevel: env("LOG_LEVEL") ?? "info",
		nodeId: env("NODE_ID"),
		namespace: env("NAMESPACE") ?? "platform",
		redisPrefix: env("REDIS_PREFIX"),
		servicePorts: flag("SERVICE_PORTS"),
		opsPortOffset: portOffset(env("OPS_PORT_OFFSET")),
	};
}

export function ensureDir(dir: string): string {
	if (!existsSync(dir)) mkdirSync(dir, { recursive: true });
	return dir;
}

/** A JSON file readable by its owner only (bootstrap values, generated keys). */
export function writePrivateJson(file: string, value: unknown): void {
	ensureDir(path.dirname(file));
	writeFileSync(file, JSON.stringify(value, null, 2), { mode: 0o600 });
	chmodSync(file, 0o600);
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
	if (stored.jwtSecret !== keys.jwtSecret && !env("JWT_SECRET") || stored.aesSecret !== keys.aesSecret && !env("AES_SECRET"))
		writePrivateJson(file, { jwtSecret: env("JWT_SECRET") ? stored.jwtSecret : keys.jwtSecret, aesSecret: env("AES_SECRET") ? stored.aesSecret : keys.aesSecret });
	return keys;
}

const byBroker = new WeakMap<object, PlatformConfig>();

/** The configuration a node was started with (tests start several in one process, each with its own). */
export function bindConfig(broker: object, cfg: PlatformConfig): void {
	byBroker.set(broker, cfg);
}

export function configOf(broker: object): PlatformConfig {
	return byBroker.get(broker) ?? readConfig();
}
