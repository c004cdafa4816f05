/**
 * DATABASE_POOL_SIZE: the most connections a process opens to DATABASE_URL (runtime/config.ts, runtime/relational.ts).
 * Read from the environment (default 20, a whole number of at least 1), and held by the pool: more statements at
 * once than that wait for a connection instead of opening more. Runs on the local PostgreSQL server.
 */
import { rmSync } from "fs";
import { Client } from "pg";
import { readConfig } from "../../runtime/config";
import { openRelational, releaseRelational } from "../../runtime/relational";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { needServers, tempDir } from "../helpers/platform";

const servers = needServers(["PostgreSQL", 5432]);

const saved = process.env.DATABASE_POOL_SIZE;
afterEach(() => {
	if (saved === undefined) delete process.env.DATABASE_POOL_SIZE;
	else process.env.DATABASE_POOL_SIZE = saved;
});

test("DATABASE_POOL_SIZE: 20 by default, a whole number of at least 1", () => {
	delete process.env.DATABASE_POOL_SIZE;
	expect(readConfig().databasePoolSize).toBe(20);
	process.env.DATABASE_POOL_SIZE = "5";
	expect(readConfig().databasePoolSize).toBe(5);
	for (const bad of ["0", "2.5", "many", "-3"]) {
		process.env.DATABASE_POOL_SIZE = bad;
		expect(() => readConfig()).toThrow(`DATABASE_POOL_SIZE must be an integer, at least 1, got ${bad}`);
	}
});

servers.describe("the pool on DATABASE_URL", () => {
	let db: TestDatabase;
	beforeAll(async () => {
		db = (await testDatabase())!;
	});
	afterAll(async () => {
		await db?.drop();
	});

	test("eight statements at once on a pool of 3 use 3 connections of the server, and all eight complete", async () => {
		const cfg = { databaseUrl: db.url, dataDir: tempDir(), databasePoolSize: 3 };
		const rel = await openRelational(cfg);
		const admin = new Client({ connectionString: db.url });
		await admin.connect();
		try {
			const running = Promise.all(Array.from({ length: 8 }, (_, i) => rel.query<{ i: number }>("select $1::int as i, pg_sleep(0.4)", [i])));
			await new Promise((r) => setTimeout(r, 200));
			const { rows } = await admin.query<{ n: number }>("select count(*)::int as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()");
			expect(rows[0].n).toBe(3);
			expect((await running).map((r) => r.rows[0].i)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
		} finally {
			await admin.end();
			await releaseRelational(cfg);
			rmSync(cfg.dataDir, { recursive: true, force: true });
		}
	});
});
