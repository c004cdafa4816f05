/**
 * LOG_FORMAT=json: every line a platform process writes, from its first start (the one-time root credentials
 * included) to its ordered stop, is one JSON object with a timestamp, a level and a message, so a log shipper reads
 * the output as it is. A LOG_FORMAT the platform does not know refuses the start, in that format's absence, as text.
 */
import { readFileSync } from "fs";
import path from "path";
import { startNode, stopNode, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freePort } from "../helpers/ports";

jest.setTimeout(180_000);

let node: ChildNode | undefined;
afterAll(async () => {
	await stopNode(node, 30_000);
});

test("LOG_FORMAT=json: every line of a first start and an ordered stop is a JSON object (ts, level, msg)", async () => {
	const port = await freePort();
	node = startNode("log-json", { PORT: String(port), MQTT_PORT: "0", LOG_LEVEL: "info", LOG_FORMAT: "json" });
	await waitForHttp(`http://127.0.0.1:${port}/status`, [node], { timeoutMs: 120_000 });
	node.child.kill("SIGTERM");
	expect(await node.exited).toBe(0);
	const lines = node
		.output()
		.split("\n")
		.filter((l) => l.trim() !== "");
	const notJson = lines.filter((l) => {
		try {
			const o = JSON.parse(l);
			return !(o && typeof o === "object" && typeof o.ts === "number" && typeof o.level === "string" && typeof o.msg === "string");
		} catch {
			return true;
		}
	});
	expect(notJson).toEqual([]);
	const entries = lines.map((l) => JSON.parse(l));
	// The one-time credentials: one entry with the values bootstrap.json keeps.
	const seeded = entries.filter((e) => e.msg.startsWith("Platform seeded."));
	const kept = JSON.parse(readFileSync(path.join(node.dataDir, "bootstrap.json"), "utf8"));
	expect(seeded.map((e) => [e.client_id, e.username, e.password])).toEqual([[kept.client_id, kept.username, kept.password]]);
	for (const step of ["SIGTERM received: stopping", "stop: cache closed"]) expect(entries.some((e) => e.msg.includes(step))).toBe(true);
});

test("an unknown LOG_FORMAT refuses the start with one line naming the setting", async () => {
	const other = startNode("log-bad", { PORT: "0", MQTT_PORT: "0", LOG_FORMAT: "xml" });
	try {
		expect(await other.exited).toBe(1);
		expect(other.output().trim().split("\n").pop()).toBe("cannot start: LOG_FORMAT must be text or json, got xml");
	} finally {
		await stopNode(other, 10_000);
	}
});
