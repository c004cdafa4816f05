/**
 * A test platform's PostgreSQL database on the local server (127.0.0.1:5432, trust auth), made from a template.
 *
 * The suite boots a few hundred platforms. With no DATABASE_URL each one ran an embedded PostgreSQL of its own: its
 * cluster copied into DATA_DIR (pg-template.ts; `cp` of 46 MB, 0.3 s of a blocked worker), a server process started
 * and, at the stop, shut down with a checkpoint. When the local server answers, a platform booted by bootPlatform on a
 * DATA_DIR of its own instead gets a database of its own there (DATABASE_URL), created by the server from a template
 * database that holds the schema with every table empty (CREATE DATABASE ... TEMPLATE, 60-80 ms) and dropped at the
 * cleanup. The template is built once per version of the sources (pg-template.ts `sourcesHash`): a platform started
 * on a new database creates the schema, then every table is emptied (EMPTY_TABLES). This is the production
 * configuration (DATABASE_URL; docs/production.md); the embedded server keeps its own tests, which give a DATA_DIR or
 * `databaseUrl: undefined` (hard-local, datadir-lock, the child-process nodes of test/helpers/nodes.ts), and
 * PLATFORM_TEST_EMBEDDED_PG=1 turns this off for every platform.
 *
 * Its pool is the embedded server's size (10 connections), and a platform gets a database there only while the server
 * has 40 connection slots free (the files running alongside start nodes of their own on it): else the embedded server.
 *
 * Names: the template `ptpl_<sources hash>`, a platform's database `ptest_<pid of the test worker>_<random>`. A
 * worker's first use drops the databases of workers that are no longer running (a run cut short, or a test that
 * stopped its platform without its cleanup).
 */
import { randomBytes } from "crypto";
import os from "os";
import path from "path";
import { existsSync, mkdtempSync, rmSync } from "fs";
import { Client } from "pg";
import { startPlatform } from "../../platform";
import { alive } from "../../runtime/pids";
import { EMPTY_TABLES, sourcesHash } from "./pg-template";

const SERVER = "postgres://postgres@127.0.0.1:5432";
/**
 * The same server through its Unix socket, for the platforms' own connections when the socket is there (Debian's
 * packages put it in /var/run/postgresql): a statement over loopback TCP cost 50-66 us of the client's CPU and 41-51
 * of the server's, over the socket 42-44 and 33 (20 000 `select $1` here), and a test platform sends thousands.
 */
const SOCKET_DIR = "/var/run/postgresql";
const platformUrl = (db: string) => (existsSync(`${SOCKET_DIR}/.s.PGSQL.5432`) ? `postgres://postgres@/${db}?host=${SOCKET_DIR}` : `${SERVER}/${db}`);
/** A test platform's pool on its database: the embedded server's size (runtime/relational.ts). */
export const TEST_POOL_SIZE = 10;
/**
 * Connection slots the server must have free for a new platform's database; with fewer (other test files' nodes, or a
 * server with a low `max_connections`), that platform runs the embedded PostgreSQL instead.
 */
const SPARE_SLOTS = 40;

export interface ServerDatabase {
	url: string;
	/** The same database over 127.0.0.1:5432, for a test that puts a proxy between a platform and the server. */
	tcpUrl: string;
	drop(): Promise<void>;
}

async function on<T>(db: string, fn: (c: Client) => Promise<T>): Promise<T> {
	const c = new Client({ connectionString: `${SERVER}/${db}`, connectionTimeoutMillis: 5000 });
	await c.connect();
	try {
		return await fn(c);
	} finally {
		await c.end();
	}
}

/**
 * A template of other sources is kept this long after it was built: another checkout of the project on the machine
 * (a second working tree, its own sources) may be copying it right now.
 */
const OTHER_TEMPLATE_TTL_MS = 6 * 3600_000;

/** Databases of test workers that are gone, and templates of other sources that nobody used for OTHER_TEMPLATE_TTL_MS. */
async function sweep(template: string): Promise<void> {
	const { rows } = await on("test", (c) =>
		c.query<{ datname: string; note: string | null }>(
			"select datname, shobj_description(oid, 'pg_database') as note from pg_database where datname like 'ptest\\_%' or datname like 'ptpl\\_%'",
		),
	);
	for (const { datname, note } of rows) {
		// A platform's database or a template's build: stale once its worker is gone; a template: once the sources moved on
		// and its build time (its comment) is old.
		const pid = /^ptest_(\d+)_|^ptpl_[0-9a-f]+_b(\d+)$/.exec(datname)?.slice(1).find(Boolean);
		const stale = pid ? !alive(Number(pid)) : datname !== template && !(Date.now() - Number(note) < OTHER_TEMPLATE_TTL_MS);
		// Without FORCE: a database somebody is connected to stays.
		if (stale) await on("test", (c) => c.query(`drop database if exists ${datname}`)).catch(() => undefined);
	}
}

/** The template database for these sources, built when missing (by whichever worker gets there first). */
async function build(template: string): Promise<void> {
	const exists = await on("test", (c) => c.query("select 1 from pg_database where datname = $1", [template]));
	if (exists.rowCount) return;
	const tmp = `${template}_b${process.pid}`;
	await on("test", async (c) => {
		await c.query(`drop database if exists ${tmp} with (force)`);
		await c.query(`create database ${tmp}`);
	});
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "platform-test-tpl-"));
	try {
		const p = await startPlatform({ port: 0, host: "127.0.0.1", logLevel: "error", dataDir, databaseUrl: platformUrl(tmp) });
		await p.stop();
		await on(tmp, (c) => c.query(EMPTY_TABLES));
		await on("test", (c) => c.query(`comment on database ${tmp} is '${Date.now()}'`));
		// Another worker may have renamed its own build meanwhile: ours goes.
		await on("test", (c) => c.query(`alter database ${tmp} rename to ${template}`)).catch(() => undefined);
	} finally {
		rmSync(dataDir, { recursive: true, force: true });
		await on("test", (c) => c.query(`drop database if exists ${tmp} with (force)`)).catch(() => undefined);
	}
}

let ready: Promise<string | undefined> | undefined;

/** The template's name, or undefined when the server does not answer or the embedded server is asked for. */
function templateDatabase(): Promise<string | undefined> {
	return (ready ??= (async () => {
		if (process.env.PLATFORM_TEST_EMBEDDED_PG === "1" || process.env.DATABASE_URL) return undefined;
		const template = `ptpl_${sourcesHash()}`;
		try {
			await sweep(template);
			await build(template);
			return template;
		} catch {
			return undefined;
		}
	})());
}

/** A new database from the template, or undefined (the platform then runs the embedded PostgreSQL). */
export async function serverDatabase(): Promise<ServerDatabase | undefined> {
	const template = await templateDatabase();
	if (!template) return undefined;
	const name = `ptest_${process.pid}_${randomBytes(5).toString("hex")}`;
	const made = await on("test", async (c) => {
		const { rows } = await c.query<{ free: number }>(
			"select current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int - count(*)::int as free from pg_stat_activity",
		);
		if (rows[0].free < SPARE_SLOTS) return false;
		await c.query(`create database ${name} template ${template}`);
		return true;
	});
	if (!made) return undefined;
	return {
		url: platformUrl(name),
		tcpUrl: `${SERVER}/${name}`,
		drop: () => on("test", (c) => c.query(`drop database if exists ${name} with (force)`)).then(() => undefined),
	};
}
