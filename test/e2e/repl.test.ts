/**
 * Issue 13 item 6: the REPL is an operator's tool. In a terminal (tmux), `npm run repl` and
 * `moleculer-runner --config moleculer.config.ts --repl` start the platform with the REPL; a collection call without
 * a principal answers a clear message (no stack); `as <username|client id>` makes later calls go through the
 * authority layer with that principal's token.
 */
import { execFileSync } from "child_process";
import { rmSync } from "fs";
import path from "path";
import { tempDir } from "../helpers/platform";
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

jest.setTimeout(180_000);

class Terminal {
	constructor(readonly name: string) {}
	static async start(name: string, command: string): Promise<Terminal> {
		execFileSync(tmux, ["new-session", "-d", "-s", name, "-x", "220", "-y", "60", command]);
		const t = new Terminal(name);
		await t.waitFor(/^mol \$ ?$/m, 120_000);
		return t;
	}
	screen(): string {
		return execFileSync(tmux, ["capture-pane", "-p", "-t", this.name, "-S", "-400"], { encoding: "utf8" });
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
	/** Types a line; resolves with what appeared after it once the prompt is back. */
	async type(line: string): Promise<string> {
		const before = this.screen().trimEnd().length;
		execFileSync(tmux, ["send-keys", "-t", this.name, "-l", line]);
		execFileSync(tmux, ["send-keys", "-t", this.name, "Enter"]);
		const s = await this.waitFor(/\n[^\n]*\nmol \$ ?\s*$/, 20_000, before);
		return s;
	}
	stop(): void {
		try {
			execFileSync(tmux, ["kill-session", "-t", this.name]);
		} catch {
			/* already gone */
		}
	}
}

suite("the operator's REPL in a terminal", () => {
	const dirs: string[] = [];
	const terms: Terminal[] = [];
	afterAll(async () => {
		for (const t of terms) t.stop();
		await sleep(2000);
		for (const d of dirs) rmSync(d, { recursive: true, force: true });
	});

	async function open(kind: "npm" | "runner"): Promise<Terminal> {
		const dir = tempDir("repl-");
		dirs.push(dir);
		const port = await freePort();
		const cmd = kind === "npm" ? "npm run repl" : "node --import tsx node_modules/.bin/moleculer-runner --config moleculer.config.ts --repl";
		const t = await Terminal.start(`repl-${kind}-${process.pid}`, `cd ${ROOT} && PORT=${port} HOST=127.0.0.1 DATA_DIR=${dir} LOG_LEVEL=warn ${cmd}`);
		terms.push(t);
		return t;
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
