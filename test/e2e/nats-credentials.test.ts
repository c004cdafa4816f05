/**
 * NATS as docker-compose.yml runs it: a NATS server of this test's own (free ports, its own JetStream directory) on
 * deploy/nats.conf, which takes the user and password from its environment. A node whose TRANSPORTER and STREAM_URL
 * carry them joins and its change stream is up; a node with a wrong password is refused ('Authorization Violation'),
 * keeps trying, and never prints the password. Skips with a message when nats-server is not installed (fails under
 * REQUIRE_SERVERS=1).
 */
import { spawn, spawnSync, type ChildProcess } from "child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import { startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freePort } from "../helpers/ports";
import { serverAnswers } from "../helpers/platform";
import { waitForValue } from "../helpers/wait";

const ROOT = path.resolve(__dirname, "../..");
const installed = spawnSync("sh", ["-c", "command -v nats-server"], { stdio: "ignore" }).status === 0;
if (!installed && process.env.REQUIRE_SERVERS === "1") throw new Error("nats-server is not installed (REQUIRE_SERVERS=1)");
if (!installed) console.warn("SKIPPED: nats-server is not installed; the NATS credentials tests are reported as skipped");
const live = installed ? test : test.skip;

jest.setTimeout(60_000);

const USER = "platform";
const PASSWORD = `pw${testDeployment().id}`;
let dir = "";
let nats: ChildProcess | undefined;
let natsPort = 0;
const natsUrl = (user: string, password: string) => `nats://${user}:${password}@127.0.0.1:${natsPort}`;
const nodes: ChildNode[] = [];

beforeAll(async () => {
	if (!installed) return;
	dir = mkdtempSync(path.join(os.tmpdir(), "nats-cred-"));
	// The compose file's configuration, with this test's JetStream directory instead of the container's /data.
	const conf = readFileSync(path.join(ROOT, "deploy/nats.conf"), "utf8").replace('store_dir: "/data"', `store_dir: ${JSON.stringify(dir)}`);
	writeFileSync(path.join(dir, "nats.conf"), conf);
	natsPort = await freePort();
	const monitor = await freePort();
	nats = spawn("nats-server", ["-c", path.join(dir, "nats.conf"), "-a", "127.0.0.1", "-p", String(natsPort), "-m", String(monitor)], {
		env: { PATH: process.env.PATH!, NATS_USER: USER, NATS_PASSWORD: PASSWORD },
		stdio: "ignore",
	});
	await waitForValue("the test's NATS server", () => serverAnswers(natsPort), 10_000);
});

afterAll(async () => {
	await Promise.all(nodes.map((n) => stopNode(n)));
	if (nats && nats.exitCode === null) {
		const exited = new Promise((r) => nats!.once("exit", r));
		nats.kill("SIGTERM");
		await exited;
	}
	if (dir) rmSync(dir, { recursive: true, force: true });
});

/** One node running everything over the given NATS URL (transporter and change stream). */
async function node(name: string, url: string): Promise<{ node: ChildNode; port: number }> {
	const port = await freePort();
	const d = testDeployment();
	const n = startNode(name, { TRANSPORTER: url, EVENT_STREAM: "nats", STREAM_URL: url, NAMESPACE: d.namespace, PORT: String(port) });
	nodes.push(n);
	return { node: n, port };
}

live("a node with the user and password of the environment joins; its change stream is JetStream's and up", async () => {
	const { node: n, port } = await node("cred-ok", natsUrl(USER, PASSWORD));
	const status = await waitForHttp(`http://127.0.0.1:${port}/status`, [n], { timeoutMs: 45_000 });
	expect(status.body.info["event stream"]).toEqual({ status: "up" });
	expect(n.output()).not.toContain(PASSWORD);
});

live("a wrong password is refused: the node keeps trying, says why, and never prints the password", async () => {
	const wrong = `wrong${PASSWORD}`;
	const { node: n } = await node("cred-wrong", natsUrl(USER, wrong));
	await waitForValue("the refusal in the node's output", async () => n.output().includes("Authorization Violation"), 30_000);
	expect(n.child.exitCode).toBeNull();
	expect(n.output()).not.toContain(wrong);
});
