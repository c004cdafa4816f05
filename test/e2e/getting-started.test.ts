/**
 * Issue 13 item 1: the guide is run, not just read. Every `bash` block of docs/getting-started.md is executed, in
 * order, in one shell (`set -e -o pipefail`, so any failing `curl -f` fails the test) against a fresh `npm start`
 * on a free PORT, MQTT_PORT and a temp DATA_DIR; the answers the guide shows are checked. The docs travel with the
 * code: no link leaves the repository's docs.
 *
 * Issue 33 item 6: the guide's requests pass through a recording proxy, and each request and its answer is checked
 * against the OpenAPI document the platform serves (test/helpers/openapi-check.ts, ajv): what Prism's proxy mode
 * with `--errors` would check, without its 74 MB of dependencies (docs/decisions.md, "The guide against the document").
 */
import { spawn, execFileSync, type ChildProcess } from "child_process";
import { existsSync, readdirSync, readFileSync, rmSync } from "fs";
import path from "path";
import { openApiChecker, recordingProxy } from "../helpers/openapi-check";
import { tempDir } from "../helpers/platform";
import { freePort } from "../helpers/ports";
import { sleep } from "../helpers/wait";

jest.setTimeout(240_000);

const ROOT = path.resolve(__dirname, "../..");
const GUIDE = path.join(ROOT, "docs", "getting-started.md");
const has = (bin: string) => {
	try {
		execFileSync("which", [bin], { stdio: "ignore" });
		return true;
	} catch {
		return false;
	}
};
const tools = ["bash", "curl", "jq"].filter((t) => !has(t));
if (tools.length && process.env.REQUIRE_SERVERS === "1") throw new Error(`REQUIRE_SERVERS=1 but ${tools.join(", ")} missing (the guide uses them)`);
const suite = tools.length ? describe.skip : describe;

/** The guide's executable blocks, in order. */
export function bashBlocks(markdown: string): string[] {
	return [...markdown.matchAll(/^```bash\n([\s\S]*?)^```/gm)].map((m) => m[1]);
}

describe("docs travel with the code", () => {
	test("README and docs/ link only to files of the repository", () => {
		const files = [path.join(ROOT, "README.md"), ...readdirSync(path.join(ROOT, "docs")).map((f) => path.join(ROOT, "docs", f))].filter((f) => f.endsWith(".md"));
		const broken: string[] = [];
		for (const f of files) {
			const text = readFileSync(f, "utf8");
			for (const m of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
				const target = m[1];
				if (/^[a-z]+:/i.test(target)) continue; // http(s), mailto
				if (!existsSync(path.resolve(path.dirname(f), target))) broken.push(`${path.relative(ROOT, f)} -> ${target}`);
			}
			if (/\.\.\/shared\//.test(text)) broken.push(`${path.relative(ROOT, f)} -> ../shared/...`);
		}
		expect(broken).toEqual([]);
	});

	test("the guide and the API reference exist and link each other", () => {
		const guide = readFileSync(GUIDE, "utf8");
		const api = readFileSync(path.join(ROOT, "docs", "api.md"), "utf8");
		expect(guide).toContain("](api.md)");
		expect(guide).toContain("](security.md)");
		expect(api).toContain("](getting-started.md)");
		expect(bashBlocks(guide).length).toBeGreaterThanOrEqual(8);
	});
});

suite("docs/getting-started.md, executed against a fresh npm start", () => {
	let npm: ChildProcess;
	let log = "";
	let dataDir: string;
	let port: number;
	let mqttPort: number;
	let proxy: Awaited<ReturnType<typeof recordingProxy>>;

	beforeAll(async () => {
		dataDir = tempDir("guide-");
		port = await freePort();
		mqttPort = await freePort();
		npm = spawn("npm", ["start"], {
			cwd: ROOT,
			env: { ...process.env, PORT: String(port), HOST: "127.0.0.1", MQTT_PORT: String(mqttPort), DATA_DIR: dataDir, LOG_LEVEL: "info" },
			stdio: ["ignore", "pipe", "pipe"],
		});
		npm.stdout!.on("data", (c) => (log += c));
		npm.stderr!.on("data", (c) => (log += c));
		const end = Date.now() + 120_000;
		for (;;) {
			if (npm.exitCode !== null) throw new Error(`npm start exited: ${log.slice(-3000)}`);
			if (existsSync(path.join(dataDir, "bootstrap.json")) && log.includes("Platform gateway listening on")) break;
			if (Date.now() > end) throw new Error(`npm start did not come up: ${log.slice(-3000)}`);
			await sleep(200);
		}
		proxy = await recordingProxy(`http://127.0.0.1:${port}`);
	});

	afterAll(async () => {
		await proxy?.close();
		if (npm && npm.exitCode === null) {
			const exited = new Promise((r) => npm.once("exit", r));
			npm.kill("SIGTERM");
			await Promise.race([exited, sleep(30_000)]);
		}
		rmSync(dataDir, { recursive: true, force: true });
	});

	test("every bash block runs, in order, and answers what the guide says", async () => {
		const script = bashBlocks(readFileSync(GUIDE, "utf8")).join("\n");
		const run = spawn("bash", ["-e", "-o", "pipefail", "-c", script], {
			cwd: ROOT,
			env: { ...process.env, BASE: proxy.url, DATA_DIR: dataDir, MQTT_PORT: String(mqttPort) },
			stdio: ["ignore", "pipe", "pipe"],
		});
		let out = "";
		let err = "";
		run.stdout!.on("data", (c) => (out += c));
		run.stderr!.on("data", (c) => (err += c));
		const code = await new Promise<number | null>((r) => run.once("exit", r));
		if (code !== 0) throw new Error(`the guide failed (exit ${code})\n--- stdout\n${out}\n--- stderr\n${err.slice(-3000)}\n--- platform\n${log.slice(-2000)}`);
		const lines = out.trim().split("\n");
		expect(lines[0]).toBe('"ok"');
		expect(lines).toContain('{"domain":"root.local","scope":"whole"}');
		expect(lines).toContainEqual(expect.stringMatching(/^\{"subject":"[0-9a-f]{24}@acme\.example","action":"manage","object":"identity:users"\}$/));
		expect(lines).toContain('{"subject":"@editor@acme.example","action":"write","object":"content:notes"}');
		expect(lines).toContainEqual(
			expect.stringMatching(
				/^\{"statusCode":400,"message":"subject: domain 'other\.example' is not registered for client [0-9a-f]{24} \(register it on that client, or grant as the operator\)","error":"Bad Request"\}$/,
			),
		);
		expect(lines).toContain('"First note, edited"');
		expect(lines).toContainEqual(expect.stringMatching(/^\{"items":\[\{"id":"[0-9a-f]{24}","title":"Second note"\}\],"total":1\}$/));
		expect(lines).toContain('{"total":2}');
		expect(lines).toContainEqual(expect.stringMatching(/^\{"key":"CQRS","eid":"[0-9a-f]{24}","value":\{"webhook":"https:\/\/hooks\.acme\.example\/platform"\}\}$/));
		// The cursor's count of documents, then the MQTT subscriber's count of the message it saw.
		expect(lines.slice(-1)).toEqual(["1"]);
		// The webhook secret never comes back.
		expect(out).not.toContain("whsec_");
	});

	test("every request of the guide, and its answer, is as the OpenAPI document describes", async () => {
		const doc = (await (await fetch(`http://127.0.0.1:${port}/api-json`)).json()) as Record<string, unknown>;
		const checker = openApiChecker(doc);
		const problems = proxy.exchanges.flatMap((ex) => checker.check(ex));
		expect(problems).toEqual([]);
		// Every step went through the proxy: the form logins (HTTP Basic and password), the 400, the cursor's stream.
		const seen = proxy.exchanges.map((ex) => `${ex.method} ${checker.operationOf(ex.method, ex.url)?.template} ${ex.status}`);
		expect(seen).toEqual(
			expect.arrayContaining([
				"GET /status 200",
				"POST /auth/token 200",
				"POST /domain/clients 200",
				"POST /auth/grants 400",
				"GET /content/notes 200",
				"GET /content/notes/cursor 200",
				"PUT /content/notes/{id}/restore 200",
				"POST /context/configs 200",
			]),
		);
		const basic = proxy.exchanges.filter((ex) => String(ex.requestHeaders.authorization ?? "").startsWith("Basic ") && ex.url === "/auth/token");
		expect(basic.map((ex) => [ex.requestHeaders["content-type"], ex.requestBody, ex.status])).toEqual([
			["application/x-www-form-urlencoded", "grant_type=client_credentials", 200],
		]);
		expect(proxy.exchanges.length).toBeGreaterThanOrEqual(25);
	});
});
