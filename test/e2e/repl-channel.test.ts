/**
 * The console's channel (runtime/datadir-lock.ts, runtime/repl.ts) in one process, through a real DATA_DIR lock: a console is
 * refused while the platform does not serve consoles yet, then handed over; the Linux abstract socket (which any local
 * user can reach) never hands one over; a session runs moleculer-repl's commands and the project's in the broker and
 * sends their output back, with its own principal; `exit` detaches; a console gone mid-command harms nothing and the
 * next one is served; release cuts the consoles still attached (a platform's stop never waits for them).
 */
import { Console } from "console";
import { mkdtempSync, rmSync } from "fs";
import net from "net";
import os from "os";
import path from "path";
import { ServiceBroker, type Middleware } from "moleculer";
import { attachConsole, lockDataDir, type ConsoleLink, type DataDirLock } from "../../runtime/datadir-lock";
import { consoleSessions, ReplPrincipalMiddleware } from "../../runtime/repl";
import { sleep } from "../helpers/wait";

jest.setTimeout(60_000);

let dir: string;
let lock: DataDirLock;
let broker: ServiceBroker;
const finished: string[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (err: unknown) => unhandled.push(err);

// What the commands print goes through the process's streams, as in a platform (not through jest's console).
const jestConsole = global.console;

beforeAll(async () => {
	global.console = new Console(process.stdout, process.stderr);
	process.on("unhandledRejection", onUnhandled);
	dir = mkdtempSync(path.join(os.tmpdir(), "repl-channel-"));
	lock = (await lockDataDir({ dataDir: dir }))!;
	broker = new ServiceBroker({ logger: false, middlewares: [ReplPrincipalMiddleware as unknown as Middleware] });
	broker.createService({
		name: "probe",
		actions: {
			echo: (ctx) => ({ echoed: ctx.params }),
			noisy() {
				console.log("logged by the action");
				return { noisy: true };
			},
			async slow(ctx) {
				await sleep(800);
				finished.push(String((ctx.params as { tag?: string }).tag));
				return { slow: true };
			},
		},
	});
	await broker.start();
});

afterAll(async () => {
	global.console = jestConsole;
	process.off("unhandledRejection", onUnhandled);
	await broker?.stop();
	await lock?.release();
	rmSync(dir, { recursive: true, force: true });
});

/** The messages a console gets, and a way to wait for one. */
function talk(link: ConsoleLink) {
	const got: Array<Record<string, unknown>> = [];
	let text = link.rest.toString();
	let waiters: Array<() => void> = [];
	const take = () => {
		for (let eol = text.indexOf("\n"); eol >= 0; eol = text.indexOf("\n")) {
			got.push(JSON.parse(text.slice(0, eol)));
			text = text.slice(eol + 1);
		}
		for (const w of waiters) w();
	};
	link.conn.on("data", (c) => {
		text += c.toString();
		take();
	});
	link.conn.resume();
	take();
	return {
		got,
		conn: link.conn,
		send: (msg: object) => link.conn.write(`${JSON.stringify(msg)}\n`),
		/** Sends a command line; resolves with its output once `done` comes. */
		async run(line: string): Promise<string> {
			const from = got.length;
			link.conn.write(`${JSON.stringify({ line })}\n`);
			await this.until(() => got.slice(from).some((m) => m.done === true));
			return got
				.slice(from)
				.map((m) => (typeof m.out === "string" ? m.out : ""))
				.join("")
				.replace(/\x1b\[[0-9;]*m/g, "");
		},
		until(ok: () => boolean, ms = 10_000): Promise<void> {
			return new Promise((resolve, reject) => {
				const t = setTimeout(() => reject(new Error(`no answer; got ${JSON.stringify(got).slice(-2000)}`)), ms);
				const check = () => {
					if (!ok()) return;
					clearTimeout(t);
					waiters = waiters.filter((w) => w !== check);
					resolve();
				};
				waiters.push(check);
				check();
			});
		},
	};
}

const attach = async () => {
	const link = await attachConsole({ dataDir: dir });
	if (!link || "refused" in link) throw new Error(`not attached: ${JSON.stringify(link && "refused" in link ? link.refused : link)}`);
	return link;
};

test("refused while the platform serves no console; the abstract socket only ever says its pid", async () => {
	const refused = await attachConsole({ dataDir: dir });
	expect(refused).toEqual({
		refused: `the platform on DATA_DIR ${dir} (pid ${process.pid}) refused the console: the platform on this DATA_DIR is still starting: try again in a moment`,
	});
	lock.serveConsoles(consoleSessions(broker));

	if (process.platform === "linux") {
		const { createHash } = await import("crypto");
		const { realpathSync } = await import("fs");
		const name = `\0platform-datadir-${createHash("sha256").update(realpathSync(dir)).digest("hex")}`;
		const conn = net.connect(name);
		conn.on("connect", () => conn.write(`${JSON.stringify({ console: true })}\n`));
		let heard = "";
		conn.on("data", (c) => (heard += c));
		await new Promise((resolve) => conn.on("close", resolve));
		expect(heard).toBe(`${JSON.stringify({ pid: process.pid })}\n`);
	}
});

test("a session: commands and their output, its own principal, `exit`; a console gone mid-command harms nothing", async () => {
	const a = talk(await attach());
	const echoed = await a.run(`call probe.echo '{"x": 41}'`);
	expect(echoed).toContain(">> Response:");
	expect(echoed).toContain("{ echoed: { x: 41 } }");
	expect(await a.run("whoami")).toBe(">> nobody: collection actions need `as <username|client id>` first\n");
	expect(await a.run("as someone")).toBe(">> no node of the identity service answers: `as` needs one\n");
	expect(await a.run("nosuch")).toContain("error: unknown command 'nosuch'");
	const services = await a.run("services");
	expect(services).toMatch(/║ probe +│/);
	// What a called action logs is the platform's (its log), not the console's; so is what the platform prints meanwhile.
	const noisy = await a.run("call probe.noisy");
	expect(noisy).toContain("{ noisy: true }");
	expect(noisy).not.toContain("logged by the action");
	console.log("printed by the platform");
	expect(a.got.some((m) => String(m.out).includes("printed by the platform"))).toBe(false);

	// Completion of a command's name.
	a.send({ complete: "whoa" });
	await a.until(() => a.got.some((m) => Array.isArray(m.completions)));
	expect(a.got.find((m) => Array.isArray(m.completions))).toEqual({ completions: ["whoami"], line: "whoa" });

	// A console that goes away in the middle of a command: the command finishes in the broker, nothing breaks.
	const b = await attach();
	b.conn.write(`${JSON.stringify({ line: `call probe.slow '{"tag": "abandoned"}'` })}\n`);
	await sleep(100);
	b.conn.destroy();
	await sleep(1200);
	expect(finished).toEqual(["abandoned"]);
	expect(unhandled).toEqual([]);
	expect(await a.run(`call probe.echo '{"still": true}'`)).toContain("{ echoed: { still: true } }");
	const c = talk(await attach());
	expect(await c.run(`call probe.echo '{"next": 1}'`)).toContain("{ echoed: { next: 1 } }");

	// `exit` detaches that console only (the broker, the process and the other console stay).
	const closed = new Promise((resolve) => a.conn.once("close", resolve));
	a.send({ line: "exit" });
	await a.until(() => a.got.some((m) => m.bye === true));
	await closed;
	expect(broker.started).toBe(true);
	expect(await c.run("whoami")).toContain(">> nobody");
});

test("release cuts the consoles still attached: it does not wait for them", async () => {
	const link = await attach();
	const closed = new Promise((resolve) => link.conn.once("close", resolve));
	const t0 = Date.now();
	await lock.release();
	await closed;
	expect(Date.now() - t0).toBeLessThan(2000);
	expect(await attachConsole({ dataDir: dir })).toBeUndefined();
});
