/**
 * A DATA_DIR belongs to the platform process that holds it (runtime/datadir-lock.ts). A second `npm start` (on the same
 * port or another) or `npm run repl` on the DATA_DIR of a running embedded platform exits at once, non-zero, with
 * `DATA_DIR <path> is in use by pid <n>`, having touched nothing: no stop of the first's embedded PostgreSQL, no file
 * written. The first keeps serving a write load meanwhile, and after it restarts every create it acknowledged is there.
 */
import { spawn } from "child_process";
import { readdirSync, readFileSync, rmSync } from "fs";
import path from "path";
import { alive } from "../../runtime/pids";
import { client, startNode, stopNode, waitForHttp, type ChildNode } from "../helpers/nodes";
import { tempDir } from "../helpers/platform";
import { pgTemplate, seedEmbeddedPg } from "../helpers/pg-template";
import { freePort } from "../helpers/ports";
import { sleep, waitForValue } from "../helpers/wait";

jest.setTimeout(400_000);

const ROOT = path.resolve(__dirname, "../..");
/** How long a refused second process may take (npm, tsx and the lock check on a busy machine), and when it is killed. */
const PROMPT_MS = 20_000;
const KILL_MS = 45_000;

interface Outcome {
	what: string;
	code: number | null;
	ms: number;
	out: string;
}

/** `npm <args>` on `dataDir` as an operator would run it; killed (with its process group) if still running after KILL_MS. */
async function second(what: string, args: string[], env: Record<string, string>): Promise<Outcome> {
	const started = Date.now();
	const proc = spawn("npm", args, {
		cwd: ROOT,
		// Unset (empty) what a parent environment might carry: the one-process default with embedded stores.
		env: {
			...process.env,
			HOST: "127.0.0.1",
			LOG_LEVEL: "warn",
			MQTT_PORT: "0",
			NODE_ID: "",
			SERVICES: "",
			TRANSPORTER: "",
			DATABASE_URL: "",
			MONGO_URI: "",
			REDIS_URL: "",
			...env,
		},
		// stdin stays open: the REPL would otherwise end with its input.
		stdio: ["pipe", "pipe", "pipe"],
		detached: true,
	});
	let out = "";
	proc.stdout!.on("data", (c) => (out += c));
	proc.stderr!.on("data", (c) => (out += c));
	let timer: NodeJS.Timeout | undefined;
	const code = await Promise.race([
		new Promise<number | null>((r) => proc.once("exit", (c) => r(c))),
		new Promise<"running">((r) => (timer = setTimeout(() => r("running"), KILL_MS))),
	]);
	clearTimeout(timer);
	const ms = Date.now() - started;
	if (code === "running") {
		try {
			process.kill(-proc.pid!, "SIGKILL");
		} catch {
			/* gone */
		}
		return { what, code: null, ms, out: `${out}\n(still running after ${KILL_MS} ms: killed)` };
	}
	return { what, code, ms, out };
}

/** Writers creating notes until stopped (each at most ~20 a second); the ids of the acknowledged (200) creates. */
function writeLoad(http: ReturnType<typeof client>, token: string, writers = 4) {
	const acked: string[] = [];
	let stopping = false;
	const writer = async (w: number) => {
		for (let i = 0; !stopping; i++) {
			const r = await http("POST", "/content/notes", { token, body: { title: `lock-${w}-${i}` } }).catch(() => null);
			if (r?.status === 200) acked.push(r.body.data.id);
			await sleep(r?.status === 200 ? 50 : 100);
		}
	};
	const done = Promise.all(Array.from({ length: writers }, (_, w) => writer(w)));
	return {
		acked,
		async stop() {
			stopping = true;
			await done;
		},
	};
}

/**
 * What a second process must not change: the PostgreSQL server,
 * the files of DATA_DIR (directories aside: the holder makes some when first used, e.g. files/ by its cleaner).
 */
function snapshot(dataDir: string) {
	const names = readdirSync(dataDir, { recursive: true, withFileTypes: true })
		.filter((e) => !e.isDirectory())
		.map((e) => path.relative(dataDir, path.join(e.parentPath ?? e.path, e.name)))
		.filter((f) => !f.startsWith("postgres/") && !f.startsWith("files/") && !f.endsWith("~"))
		.sort();
	let postmaster: string | undefined;
	try {
		postmaster = readFileSync(path.join(dataDir, "postgres", "postmaster.pid"), "utf8").split("\n")[0];
	} catch {
		/* not running */
	}
	return { names, postmaster };
}

describe("a second process on the DATA_DIR of a running platform", () => {
	let dataDir: string;
	let env: Record<string, string>;
	let holder: ChildNode | undefined;

	beforeAll(async () => {
		dataDir = tempDir("datadir-lock-");
		if (await pgTemplate()) seedEmbeddedPg(dataDir, undefined);
		// NODE_ID empty = unset: the default, stable id claimed in DATA_DIR, as `npm start` takes it.
		env = { DATA_DIR: dataDir, PORT: String(await freePort()), NODE_ID: "", MQTT_PORT: "0" };
	});

	afterAll(async () => {
		await stopNode(holder, 30_000);
		// A PostgreSQL server a failed run left (the old code's second process started its own): by its pid file only.
		try {
			const pid = Number(readFileSync(path.join(dataDir, "postgres", "postmaster.pid"), "utf8").split("\n")[0]);
			if (pid > 1 && alive(pid) && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(dataDir)) process.kill(pid, "SIGKILL");
		} catch {
			/* none */
		}
		rmSync(dataDir, { recursive: true, force: true });
	});

	async function startHolder(name: string): Promise<{ http: ReturnType<typeof client>; token: string }> {
		holder = startNode(name, env);
		const base = `http://127.0.0.1:${env.PORT}`;
		await waitForHttp(`${base}/status`, [holder], { timeoutMs: 120_000 });
		const http = client(base);
		const root = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
		const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
		if (login.status !== 200) throw new Error(`login failed: ${login.status} ${login.text}`);
		return { http, token: login.body.data.access_token };
	}

	test("npm start (same port, another port) and npm run repl exit at once with the holder's pid; no acknowledged write is lost", async () => {
		const { http, token } = await startHolder("holder");
		const pid = holder!.pid;
		const load = writeLoad(http, token);
		await waitForValue("the first acknowledged creates", async () => load.acked.length >= 30, 60_000);
		const before = snapshot(dataDir);

		const outcomes: Outcome[] = [];
		outcomes.push(await second("npm start on the same port", ["start"], { DATA_DIR: dataDir, PORT: env.PORT }));
		outcomes.push(await second("npm start on another port", ["start"], { DATA_DIR: dataDir, PORT: String(await freePort()) }));
		outcomes.push(await second("npm run repl", ["run", "repl"], { DATA_DIR: dataDir, PORT: String(await freePort()) }));

		// The first keeps serving: more creates are acknowledged after the last attempt.
		const ackedBefore = load.acked.length;
		const serving = await waitForValue("creates acknowledged after the attempts", async () => load.acked.length >= ackedBefore + 30, 30_000).catch(() => false);
		const after = snapshot(dataDir);
		await load.stop();
		const acked = [...load.acked];

		// Stop and start the first again: every create it acknowledged is there.
		await stopNode(holder, 30_000);
		const again = await startHolder("holder-again");
		const missing: string[] = [];
		for (let i = 0; i < acked.length; i += 8)
			await Promise.all(
				acked.slice(i, i + 8).map(async (id) => {
					const r = await again.http("GET", `/content/notes/${id}`, { token: again.token });
					if (r.status !== 200) missing.push(id);
				}),
			);
		expect({ acknowledged: acked.length, missing: missing.length }).toEqual({ acknowledged: acked.length, missing: 0 });
		expect(serving).toBe(true);

		for (const o of outcomes) {
			const lines = o.out.split("\n").map((l) => l.trim());
			expect({ what: o.what, line: lines.find((l) => l.startsWith("DATA_DIR ")) ?? o.out.slice(-2000) }).toEqual({
				what: o.what,
				line: `DATA_DIR ${dataDir} is in use by pid ${pid}`,
			});
			expect({ what: o.what, failed: o.code !== null && o.code !== 0 }).toEqual({ what: o.what, failed: true });
			expect({ what: o.what, prompt: o.ms < PROMPT_MS }).toEqual({ what: o.what, prompt: true });
			// Nothing but the refusal: no platform started, not a line of a store or of PostgreSQL.
			expect(o.out).not.toMatch(/embedded PostgreSQL|ServiceBroker|compact/i);
		}
		// Untouched: the same PostgreSQL server, no file added or removed.
		expect(after).toEqual(before);
	});
});
