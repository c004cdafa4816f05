/**
 * The operators' console in a terminal (tmux), as an operator runs it (runtime/repl.ts):
 *  - no platform on DATA_DIR: `npm run repl` and `moleculer-runner --config moleculer.config.ts --repl` start the
 *    platform with the REPL (issue 13 item 6); a collection call without a principal answers a clear message (no
 *    stack); `as <username|client id>` makes later calls go through the authority layer with that principal's token;
 *  - a platform running on DATA_DIR (a real process): `npm run repl` and `npm run runner -- --repl` attach to it through
 *    its DATA_DIR socket; `services`, `call`, `as`, a dispatcher command run there (the note is in that platform), each
 *    console with its own principal and output (none in the platform's); a console killed mid-command and one that
 *    detaches with `exit` leave the platform serving, and consoles attaching again;
 *  - a deployment over NATS: with TRANSPORTER, `npm run repl` joins as a console node with no service and calls the
 *    cluster, `as` included (the identity service is on another node), touching nothing of DATA_DIR.
 */
import { execFileSync, spawn } from "child_process";
import { readdirSync, readFileSync, rmSync } from "fs";
import path from "path";
import { needServers, tempDir } from "../helpers/platform";
import { client, startNode, stopNode, testDeployment, waitForHttp } from "../helpers/nodes";
import { freePort } from "../helpers/ports";
import { sleep } from "../helpers/wait";

const ROOT = path.resolve(__dirname, "../..");
const tmux = (() => {
	try {
		return execFileSync("which", ["tmux"], { encoding: "utf8" }).trim();
	} catch {
		return "";
	}
})();
if (!tmux && process.env.REQUIRE_SERVERS === "1") throw new Error("REQUIRE_SERVERS=1 but tmux is missing (the REPL test drives a terminal)");
const suite = tmux ? describe : describe.skip;
const nats = needServers(["NATS", 4222]);
const natsSuite = tmux && nats.up ? describe : describe.skip;

jest.setTimeout(240_000);

/** Settings a console must not take from whatever environment the tmux server has. */
const UNSET = ["TRANSPORTER", "NAMESPACE", "SERVICES", "NODE_ID", "DATABASE_URL", "MONGO_URI", "DOCUMENT_STORE", "REDIS_URL", "EVENT_STREAM", "PORT", "DATA_DIR"];

/** `cmd` in ROOT with exactly `env` of the platform's settings; the exit status is printed, the pane stays. */
const shell = (env: Record<string, string>, cmd: string) =>
	`cd ${ROOT} && env ${UNSET.map((k) => `-u ${k}`).join(" ")} ${Object.entries(env)
		.map(([k, v]) => `${k}=${v}`)
		.join(" ")} HOST=127.0.0.1 LOG_LEVEL=warn ${cmd}; echo EXIT=$?; sleep 600`;

const terms: Terminal[] = [];
let seq = 0;

class Terminal {
	constructor(readonly name: string) {}
	static async start(command: string, ready = /^mol \$ ?$/m): Promise<Terminal> {
		const t = new Terminal(`repl-${process.pid}-${++seq}`);
		terms.push(t);
		execFileSync(tmux, ["new-session", "-d", "-s", t.name, "-x", "220", "-y", "60", command]);
		await t.waitFor(ready, 120_000);
		return t;
	}
	screen(): string {
		return execFileSync(tmux, ["capture-pane", "-p", "-J", "-t", this.name, "-S", "-2000"], { encoding: "utf8" });
	}
	async waitFor(re: RegExp, ms = 20_000, from = 0): Promise<string> {
		const end = Date.now() + ms;
		for (;;) {
			const s = this.screen().slice(from);
			if (re.test(s)) return s;
			if (Date.now() > end) throw new Error(`timed out waiting for ${re} in:\n${s.slice(-3000)}`);
			await sleep(200);
		}
	}
	/** Types a line and Enter; the screen's length before it. */
	send(line: string): number {
		const before = this.screen().trimEnd().length;
		execFileSync(tmux, ["send-keys", "-t", this.name, "-l", line]);
		execFileSync(tmux, ["send-keys", "-t", this.name, "Enter"]);
		return before;
	}
	/** Types a line; resolves with what appeared after it once the prompt is back. */
	async type(line: string): Promise<string> {
		const before = this.send(line);
		return this.waitFor(/\n[^\n]*\nmol \$ ?\s*$/, 30_000, before);
	}
	stop(): void {
		try {
			execFileSync(tmux, ["kill-session", "-t", this.name], { stdio: "ignore" });
		} catch {
			/* already gone */
		}
	}
}

afterAll(() => {
	for (const t of terms) t.stop();
});

/** A platform process (`node --import tsx start.ts`) on its own DATA_DIR and port, and a root token for its HTTP API. */
async function runningPlatform(name: string, env: Record<string, string> = {}) {
	const port = await freePort();
	const node = startNode(name, { PORT: String(port), MQTT_PORT: "0", ...env });
	const base = `http://127.0.0.1:${port}`;
	await waitForHttp(`${base}/status`, [node], { timeoutMs: 120_000 });
	const http = client(base);
	const root = JSON.parse(readFileSync(path.join(node.dataDir, "bootstrap.json"), "utf8"));
	const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	if (login.status !== 200) throw new Error(`login failed: ${login.status} ${login.text}`);
	return { node, base, http, token: login.body.data.access_token as string };
}

/** `as root`, then a note created through the console: its id, read back from the platform's HTTP API. */
async function createAsRoot(t: Terminal, p: Awaited<ReturnType<typeof runningPlatform>>, title: string): Promise<string> {
	expect(await t.type("as root")).toMatch(/>> Calls now run as user root \([0-9a-f]{24}\) of client [0-9a-f]{24} \(root\.local\); scopes: whole; subjects: /);
	const created = await t.type(`call content.notes.create '{"body": {"title": "${title}"}}'`);
	expect(created).toContain(`title: '${title}'`);
	const id = /\bid: '([0-9a-f]{24})'/.exec(created)![1];
	const read = await p.http("GET", `/content/notes/${id}`, { token: p.token });
	expect({ status: read.status, title: read.body?.data?.title }).toEqual({ status: 200, title });
	return id;
}

suite("the operator's REPL in a terminal, no platform running", () => {
	const dirs: string[] = [];
	afterAll(async () => {
		for (const t of terms) t.stop();
		await sleep(2000);
		for (const d of dirs) rmSync(d, { recursive: true, force: true });
	});

	async function open(kind: "npm" | "runner"): Promise<Terminal> {
		const dir = tempDir("repl-");
		dirs.push(dir);
		const cmd = kind === "npm" ? "npm run repl" : "node --import tsx node_modules/.bin/moleculer-runner --config moleculer.config.ts --repl";
		return Terminal.start(shell({ PORT: String(await freePort()), DATA_DIR: dir }, cmd));
	}

	test("npm run repl: a call without a principal says what to do; `as root` goes through the authority layer", async () => {
		const t = await open("npm");
		const refused = await t.type("call content.notes.list");
		expect(refused).toContain("content.notes.list goes through the authority layer: act as a principal first (as <username|client id>), then call it again");
		expect(refused).not.toMatch(/at .*\.ts:\d+/); // no stack trace
		expect(refused).not.toContain("authorization layers were not applied");

		expect(await t.type("whoami")).toContain(">> nobody: collection actions need `as <username|client id>` first");
		expect(await t.type("as nobody-here")).toContain(">> no user or client 'nobody-here'");
		const as = await t.type("as root");
		expect(as).toMatch(/>> Calls now run as user root \([0-9a-f]{24}\) of client [0-9a-f]{24} \(root\.local\); scopes: whole; subjects: /);

		const created = await t.type(`call content.notes.create '{"body": {"title": "from the console"}}'`);
		expect(created).toContain("title: 'from the console'");
		const listed = await t.type("call content.notes.count");
		expect(listed).toContain("{ total: 1 }");
		// A principal's grants decide: the root client has grants through the ordinary layers; its token has them too.
		expect(await t.type("unas")).toContain(">> Calls run as nobody again");
		expect(await t.type("call content.notes.count")).toContain("goes through the authority layer");
	});

	test("moleculer-runner --config moleculer.config.ts --repl starts the platform and has the same commands", async () => {
		const t = await open("runner");
		expect(await t.type("as root")).toContain(">> Calls now run as user root");
		expect(await t.type("call content.notes.count")).toContain("{ total: 0 }");
	});
});

suite("the console attached to the platform running on DATA_DIR (its socket)", () => {
	let p: Awaited<ReturnType<typeof runningPlatform>>;
	beforeAll(async () => {
		p = await runningPlatform("repl-holder");
	});
	afterAll(async () => {
		await stopNode(p?.node, 30_000);
	});

	const attach = (cmd = "npm run repl") => Terminal.start(shell({ DATA_DIR: p.node.dataDir }, cmd), />> Attached to the platform[^\n]*\nmol \$ ?$/m);

	test("npm run repl attaches: services, call, as <principal> and dispatcher commands run in that platform; consoles detach, or die mid-command, and it keeps serving", async () => {
		const a = await attach();
		expect(a.screen()).toContain(`>> Attached to the platform on DATA_DIR ${p.node.dataDir} (pid ${p.node.pid})`);
		// Not a platform of its own: no DATA_DIR refusal, no second start.
		expect(a.screen()).not.toMatch(/is in use by pid|Platform seeded/);

		const services = await a.type("services");
		for (const name of ["content", "identity", "dispatcher", "api"]) expect(services).toMatch(new RegExp(`║ ${name} +│`));
		expect(await a.type("call content.notes.count")).toContain("content.notes.count goes through the authority layer: act as a principal first");
		await createAsRoot(a, p, "from the console");
		expect(await a.type("call content.notes.count")).toContain("{ total: 1 }");
		expect(await a.type("call dispatcher.stats")).toMatch(/>> Response:\s*\n\{ pending: \d+, delivered: \d+, failed: \d+, disabled: \d+ \}/);

		// A second console has its own principal.
		const b = await attach();
		expect(await b.type("whoami")).toContain(">> nobody: collection actions need `as <username|client id>` first");
		expect(await a.type("whoami")).toMatch(/>> user root \([0-9a-f]{24}\)/);
		// ... and goes away in the middle of a command (its terminal is killed).
		const from = b.send("bench --time 4 $node.health");
		await b.waitFor(/Running 4 second\(s\)/, 20_000, from);
		b.stop();

		// The first detaches: the console process ends (status 0), the platform keeps serving.
		const bye = a.send("exit");
		expect(await a.waitFor(/EXIT=\d+/, 20_000, bye)).toMatch(/>> Detached: the platform keeps running\s*\nEXIT=0/);
		await sleep(5000); // past the end of the abandoned benchmark
		expect(p.node.child.exitCode).toBeNull();
		await waitForHttp(`${p.base}/status`, [p.node], { timeoutMs: 10_000 });
		const count = await p.http("GET", "/content/notes", { token: p.token });
		expect(count.status).toBe(200);

		// The runner's --repl attaches too; consoles still attach after all this.
		const c = await attach("npm run runner -- --repl");
		expect(await c.type("whoami")).toContain(">> nobody");
		expect(await c.type("as root")).toContain(">> Calls now run as user root");
		expect(await c.type("call content.notes.count")).toContain("{ total: 1 }");
		c.send("exit");
		await c.waitFor(/EXIT=0/);

		// What the consoles' commands printed went to them, not to the platform's output.
		expect(p.node.output()).not.toMatch(/from the console|Calls now run as|╔|Running 4 second/);
	});
});

/** `npm run repl -- --exec <line> ...` without a terminal: its status and the JSON outcome of each command. */
async function scripted(env: Record<string, string>, lines: string[]): Promise<{ status: number | null; outcomes: Array<Record<string, any>>; stderr: string }> {
	const args = ["run", "-s", "repl", "--", ...lines.flatMap((l) => ["--exec", l])];
	// Not spawnSync: the test's own HTTP connections must keep being served meanwhile (keep-alive closes are read).
	const child = spawn("npm", args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
	let stdout = "";
	let stderr = "";
	child.stdout.on("data", (c) => (stdout += c));
	child.stderr.on("data", (c) => (stderr += c));
	const status = await new Promise<number | null>((resolve) => child.once("close", resolve));
	const outcomes = stdout
		.split("\n")
		.filter((l) => l.startsWith("{"))
		.map((l) => JSON.parse(l));
	return { status, outcomes, stderr };
}

describe("scripted console commands (npm run repl -- --exec)", () => {
	let p: Awaited<ReturnType<typeof runningPlatform>>;
	beforeAll(async () => {
		p = await runningPlatform("repl-exec");
	});
	afterAll(async () => {
		await stopNode(p?.node, 30_000);
	});

	test("run in the platform on DATA_DIR: one JSON outcome a command, the call's answer in `result`, exit 0", async () => {
		const r = await scripted({ DATA_DIR: p.node.dataDir }, ["as root", `call content.notes.create '{"body": {"title": "from a script"}}'`]);
		expect(r.status).toBe(0);
		expect(r.outcomes.map((o) => [o.command, o.ok])).toEqual([
			["as root", true],
			[`call content.notes.create '{"body": {"title": "from a script"}}'`, true],
		]);
		expect(r.outcomes[0].output).toMatch(/^>> Calls now run as user root /);
		const id = r.outcomes[1].result.data.id;
		const read = await p.http("GET", `/content/notes/${id}`, { token: p.token });
		expect({ status: read.status, title: read.body?.data?.title }).toEqual({ status: 200, title: "from a script" });
		// What the commands printed went to the script, not to the platform's output.
		expect(p.node.output()).not.toMatch(/from a script|Calls now run as/);
	});

	test("a command that fails ends the run with exit 1 and its error; no platform on DATA_DIR: exit 2", async () => {
		// Each run is a console of its own: no principal yet, so the guarded call is refused.
		const refused = await scripted({ DATA_DIR: p.node.dataDir }, ["call content.notes.count", "whoami"]);
		expect(refused.status).toBe(1);
		expect(refused.outcomes).toHaveLength(1);
		expect(refused.outcomes[0]).toMatchObject({
			ok: false,
			error: "content.notes.count goes through the authority layer: act as a principal first (as <username|client id>), then call it again",
		});
		const unknown = await scripted({ DATA_DIR: p.node.dataDir }, ["no-such-command"]);
		expect([unknown.status, unknown.outcomes[0]?.ok, unknown.outcomes[0]?.error]).toEqual([1, false, "error: unknown command 'no-such-command'"]);
		const nobody = tempDir("repl-exec-none-");
		const none = await scripted({ DATA_DIR: nobody }, ["whoami"]);
		expect([none.status, none.outcomes, none.stderr.trim()]).toEqual([2, [], `no platform runs on DATA_DIR ${nobody}: start it (npm start), then run the commands again`]);
		rmSync(nobody, { recursive: true, force: true });
	});
});

natsSuite("the console joined to a deployment over NATS (TRANSPORTER)", () => {
	const d = testDeployment();
	let p: Awaited<ReturnType<typeof runningPlatform>>;
	let consoleDir: string;
	beforeAll(async () => {
		p = await runningPlatform("repl-nats", { TRANSPORTER: "nats://127.0.0.1:4222", NAMESPACE: d.namespace });
		consoleDir = tempDir("repl-console-");
	});
	afterAll(async () => {
		await stopNode(p?.node, 30_000);
		rmSync(consoleDir, { recursive: true, force: true });
	});

	test("npm run repl joins as a node with no service: nodes, services, as <principal>, call and dispatcher commands reach the cluster", async () => {
		const t = await Terminal.start(
			shell({ TRANSPORTER: "nats://127.0.0.1:4222", NAMESPACE: d.namespace, DATA_DIR: consoleDir }, "npm run repl"),
			/>> Console node console-[^\n]* joined namespace [^\n]*\nmol \$ ?$/m,
		);
		expect(t.screen()).toContain(`joined namespace ${d.namespace}: 1 other node(s)`);
		const nodes = await t.type("nodes");
		expect(nodes).toMatch(/║ console-\S+ \(\*\) +│ 1 /); // the console itself: $node only
		expect(nodes).toMatch(/║ repl-nats-[0-9a-f]{6} +│ 2\d /); // the platform: every service
		const services = await t.type("services");
		for (const name of ["content", "identity", "dispatcher"]) expect(services).toMatch(new RegExp(`║ ${name} +│`));

		await createAsRoot(t, p, "over the transporter");
		expect(await t.type("call dispatcher.stats")).toMatch(/\{ pending: \d+, delivered: \d+, failed: \d+, disabled: \d+ \}/);
		const bye = t.send("exit");
		await t.waitFor(/EXIT=0/, 20_000, bye);

		// The same commands from a script: the console node runs them and leaves.
		const r = await scripted({ TRANSPORTER: "nats://127.0.0.1:4222", NAMESPACE: d.namespace, DATA_DIR: consoleDir }, ["as root", "call content.notes.count"]);
		expect([r.status, r.outcomes.map((o) => o.ok), r.outcomes[1]?.result]).toEqual([0, [true, true], { total: 1 }]);

		// The console claimed nothing in its DATA_DIR; the platform serves on.
		expect(readdirSync(consoleDir)).toEqual([]);
		await waitForHttp(`${p.base}/status`, [p.node], { timeoutMs: 10_000 });
		expect(p.node.output()).not.toMatch(/over the transporter|Calls now run as/);
	});
});
