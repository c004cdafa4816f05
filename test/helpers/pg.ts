/**
 * A PostgreSQL database of its own on the local server (127.0.0.1:5432, trust auth): `pgstore_<random>`, created for
 * one test file and dropped afterwards. Never touches other databases.
 */
import { randomBytes } from "crypto";
import { rmSync } from "fs";
import { Client } from "pg";
import { bootPlatform, requireServer, tempDir, type TestPlatform } from "./platform";
import { releaseRelational } from "../../runtime/relational";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { createStore } from "../../stores";

export const PG_BASE = "postgres://postgres@127.0.0.1:5432";

export interface TestDatabase {
	name: string;
	url: string;
	drop(): Promise<void>;
}

async function admin<T>(fn: (c: Client) => Promise<T>): Promise<T> {
	const c = new Client({ connectionString: `${PG_BASE}/test` });
	await c.connect();
	try {
		return await fn(c);
	} finally {
		await c.end();
	}
}

/** Undefined (with the SKIPPED message of requireServer) when the server does not answer. */
export async function testDatabase(): Promise<TestDatabase | undefined> {
	if (!(await requireServer("PostgreSQL", 5432))) return undefined;
	const name = `pgstore_${randomBytes(6).toString("hex")}`;
	await admin((c) => c.query(`create database ${name}`));
	return {
		name,
		url: `${PG_BASE}/${name}`,
		drop: () => admin((c) => c.query(`drop database if exists ${name} with (force)`)).then(() => undefined),
	};
}

/**
 * A test file's store setup: a database of its own (testDatabase) and a DATA_DIR, made before its tests and removed
 * after them, with the stores' connections released. `up()` is false when the server does not answer (its tests
 * return early); `cfg()` is the store configuration on that database.
 */
export function storeDatabase(prefix: string): { dir: string; up(): boolean; url(): string; cfg(): { dataDir: string; databaseUrl: string } } {
	const dir = tempDir(prefix);
	let db: TestDatabase | undefined;
	const url = () => db!.url;
	const cfg = () => ({ dataDir: dir, databaseUrl: url() });
	beforeAll(async () => {
		db = await testDatabase();
	}, 30_000);
	afterAll(async () => {
		if (db) {
			await releaseRelational(cfg()).catch(() => undefined);
			await db.drop();
		}
		rmSync(dir, { recursive: true, force: true });
	});
	return { dir, up: () => !!db, url, cfg };
}

/**
 * A platform on `url` (DOCUMENT_STORE=postgres) whose outbox keeps every event for the test to read: a consumer group
 * that never moves holds the pruning back.
 */
export async function pgPlatformKeepingEvents(url: string): Promise<TestPlatform> {
	const p = await bootPlatform({ databaseUrl: url });
	const offsets = createStore(p.cfg, "_stream_offsets");
	await offsets.connect();
	await offsets.insert({ id: "test-hold", seq: 0 }).catch(() => undefined);
	await offsets.disconnect();
	return p;
}

/** Every record of the platform's outbox after position `after`, in order. */
export async function outboxRecords(p: TestPlatform, after = 0): Promise<OutboxRecord[]> {
	const out: OutboxRecord[] = [];
	for (let pos = after; ;) {
		const batch = await sharedOutbox(p.cfg).readFrom(pos, 1000);
		out.push(...batch);
		if (batch.length < 1000) return out;
		pos = batch[batch.length - 1].seq;
	}
}

/**
 * Records the text of every statement any pg Client sends except `admin` (the test's own connection) into the array
 * returned; `restore` ends the recording.
 */
export function recordStatements(admin: Client): { statements: string[]; restore(): void } {
	const statements: string[] = [];
	const query = Client.prototype.query as (...a: any[]) => any;
	const spy = jest.spyOn(Client.prototype, "query").mockImplementation(function (this: Client, ...args: any[]) {
		if (this !== admin) statements.push(typeof args[0] === "string" ? args[0] : args[0].text);
		return query.apply(this, args);
	} as any);
	return { statements, restore: () => spy.mockRestore() };
}
