/**
 * The embedded PostgreSQL is reached through its Unix socket in its own directory (DATA_DIR/postgres, `-k`), which
 * costs less CPU per statement than loopback TCP; the server still listens on 127.0.0.1 for other processes
 * (runningEmbedded: `npm run backup`). Each DATA_DIR here is this file's own (no template copy): the first start
 * (initdb, the initial password replaced over the socket), a restart on the same DATA_DIR, a cluster an earlier
 * version ran without a socket there, and a DATA_DIR deep enough that the socket's path passes its 107 bytes: loopback
 * TCP then, as before.
 */
import { execFileSync } from "child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "fs";
import path from "path";
import { Client } from "pg";
import { tempDir } from "../helpers/platform";
import { openRelational, releaseRelational, runningEmbedded, type Relational } from "../../runtime/relational";
import { runningServerPort, socketDirOf } from "../../runtime/pg-process";

jest.setTimeout(120_000);

const dirs: string[] = [];
afterAll(() => {
	for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const cfgOf = (dataDir: string) => ({ dataDir, databaseUrl: undefined });

/** The client address of the platform's own connection: null over a Unix socket. */
async function clientAddr(db: Relational): Promise<string | null> {
	const { rows } = await db.query<{ addr: string | null }>("select host(client_addr) as addr from pg_stat_activity where pid = pg_backend_pid()");
	return rows[0]!.addr;
}

/** postmaster.pid of the running server: its port (line 4) and socket directory (line 5). */
function pidFile(dataDir: string): { port: number; socketDir: string } {
	const lines = readFileSync(path.join(dataDir, "postgres", "postmaster.pid"), "utf8").split("\n");
	return { port: Number(lines[3]), socketDir: lines[4]! };
}

/** The server's sockets left in its directory. */
const sockets = (dataDir: string) => readdirSync(path.join(dataDir, "postgres")).filter((n) => n.startsWith(".s.PGSQL."));

/** What another process does (runningEmbedded: `npm run backup`): TCP on 127.0.0.1 with the kept password. */
async function viaRunningEmbedded(dataDir: string): Promise<string | null> {
	const config = runningEmbedded(dataDir);
	expect(config).toMatchObject({ host: "127.0.0.1" });
	const c = new Client({ ...config, connectionTimeoutMillis: 5000 });
	await c.connect();
	try {
		return (await c.query<{ addr: string | null }>("select host(client_addr) as addr from pg_stat_activity where pid = pg_backend_pid()")).rows[0]!.addr;
	} finally {
		await c.end();
	}
}

describe("embedded PostgreSQL through its Unix socket", () => {
	const dataDir = tempDir("pg-sock-");
	dirs.push(dataDir);
	const cluster = path.join(dataDir, "postgres");

	test("a first start (initdb, the initial password replaced over the socket) connects through the socket", async () => {
		const db = await openRelational(cfgOf(dataDir));
		try {
			expect(await clientAddr(db)).toBeNull();
			// The initial password was replaced: postgres.json holds the kept one only.
			expect(JSON.parse(readFileSync(path.join(dataDir, "postgres.json"), "utf8"))).toEqual({ password: expect.any(String) });
			const pid = pidFile(dataDir);
			expect(pid.socketDir).toBe(path.resolve(cluster));
			expect(runningServerPort(cluster)).toBe(pid.port);
			expect(sockets(dataDir).sort()).toEqual([`.s.PGSQL.${pid.port}`, `.s.PGSQL.${pid.port}.lock`]);
			// Other processes still reach it over TCP.
			expect(await viaRunningEmbedded(dataDir)).toBe("127.0.0.1");
		} finally {
			await releaseRelational(cfgOf(dataDir));
		}
		// Stopped: its socket is gone with postmaster.pid.
		expect(existsSync(path.join(cluster, "postmaster.pid"))).toBe(false);
		expect(sockets(dataDir)).toEqual([]);
		expect(runningServerPort(cluster)).toBeUndefined();
	});

	test("a restart on the same DATA_DIR connects through the socket, with what the first start wrote", async () => {
		const db = await openRelational(cfgOf(dataDir));
		try {
			expect(await clientAddr(db)).toBeNull();
			await db.query("create table if not exists socket_probe (n int)");
			await db.query("insert into socket_probe values ($1)", [7]);
			expect((await db.query<{ n: number }>("select n from socket_probe")).rows).toEqual([{ n: 7 }]);
		} finally {
			await releaseRelational(cfgOf(dataDir));
		}
	});

	test("sockets left by a server killed without its shutdown are removed at the next start", async () => {
		const db = await openRelational(cfgOf(dataDir));
		const { port } = pidFile(dataDir);
		const pid = Number(readFileSync(path.join(cluster, "postmaster.pid"), "utf8").split("\n")[0]);
		try {
			expect(await clientAddr(db)).toBeNull();
		} finally {
			// The server goes without removing its socket and postmaster.pid (as in an OOM kill of the platform and it).
			process.kill(pid, "SIGKILL");
			await releaseRelational(cfgOf(dataDir));
		}
		for (const until = Date.now() + 10_000; Date.now() < until && existsSync(`/proc/${pid}`);) await new Promise((r) => setTimeout(r, 50));
		expect(sockets(dataDir)).toContain(`.s.PGSQL.${port}`);
		const again = await openRelational(cfgOf(dataDir));
		try {
			expect(await clientAddr(again)).toBeNull();
			expect(sockets(dataDir).sort()).toEqual([`.s.PGSQL.${pidFile(dataDir).port}`, `.s.PGSQL.${pidFile(dataDir).port}.lock`]);
			expect((await again.query<{ n: number }>("select n from socket_probe")).rows).toEqual([{ n: 7 }]);
		} finally {
			await releaseRelational(cfgOf(dataDir));
		}
	});
});

describe("a DATA_DIR whose socket path would pass 107 bytes", () => {
	const base = tempDir("pg-long-");
	dirs.push(base);
	// `${DATA_DIR}/postgres/.s.PGSQL.${port}` passes 107 bytes whatever the port (1 to 5 digits).
	const dataDir = path.join(base, "d".repeat(Math.max(1, 98 - path.join(base, "postgres").length - 1)));
	const cluster = path.join(dataDir, "postgres");

	test("falls back to loopback TCP, and works", async () => {
		expect(Buffer.byteLength(`${cluster}/.s.PGSQL.1`)).toBeGreaterThan(107);
		expect(socketDirOf(cluster, 1)).toBeUndefined();
		mkdirSync(dataDir, { recursive: true });
		const db = await openRelational(cfgOf(dataDir));
		try {
			expect(await clientAddr(db)).toBe("127.0.0.1");
			const pid = pidFile(dataDir);
			expect(runningServerPort(cluster)).toBe(pid.port);
			expect(pid.socketDir).not.toBe(cluster);
			expect(sockets(dataDir)).toEqual([]);
			await db.query("create table socket_probe (n int)");
			await db.query("insert into socket_probe values (1)");
		} finally {
			await releaseRelational(cfgOf(dataDir));
		}
		const again = await openRelational(cfgOf(dataDir));
		try {
			expect(await clientAddr(again)).toBe("127.0.0.1");
			expect((await again.query<{ n: number }>("select n from socket_probe")).rows).toEqual([{ n: 1 }]);
		} finally {
			await releaseRelational(cfgOf(dataDir));
		}
	});

	test("its cluster, run without a socket in it and with the postgres/postgres of the first versions, moved to a short DATA_DIR uses the socket", async () => {
		// As the versions before the generated password left a cluster: postgres/postgres, no postgres.json.
		const old = await openRelational(cfgOf(dataDir));
		try {
			await old.query("alter role postgres with password 'postgres'");
		} finally {
			await releaseRelational(cfgOf(dataDir));
		}
		const short = tempDir("pg-moved-");
		dirs.push(short);
		// `cp -a` keeps the postgres system user's ownership (as root).
		execFileSync("cp", ["-a", cluster, path.join(short, "postgres")]);
		const db = await openRelational(cfgOf(short));
		try {
			expect(await clientAddr(db)).toBeNull();
			expect((await db.query<{ n: number }>("select n from socket_probe")).rows).toEqual([{ n: 1 }]);
			// The legacy password was replaced (over the socket) by a generated one, kept in postgres.json.
			const kept = JSON.parse(readFileSync(path.join(short, "postgres.json"), "utf8")) as { password: string; initial?: string };
			expect(kept.initial).toBeUndefined();
			expect(kept.password).not.toBe("postgres");
			expect(await viaRunningEmbedded(short)).toBe("127.0.0.1");
		} finally {
			await releaseRelational(cfgOf(short));
		}
	});
});
