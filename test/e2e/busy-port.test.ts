/**
 * A gateway whose PORT is taken exits non-zero, its last line naming the port and the setting, instead of logging
 * EADDRINUSE and staying up without listening (moleculer-web waits for 'listening' only), and says so in that one line,
 * before any service starts: no stack trace, no error line before it. The platform process is
 * started as `npm start` runs it (`node --import tsx start.ts`) on a port a plain TCP server holds.
 */
import net from "net";
import { startNode, stopNode, type ChildNode } from "../helpers/nodes";

jest.setTimeout(120_000);

/** Long enough for a start on a busy machine (embedded PostgreSQL included); the old gateway never exited. */
const EXIT_MS = 60_000;

let holder: net.Server | undefined;
let node: ChildNode | undefined;

afterAll(async () => {
	await stopNode(node, 10_000);
	await new Promise<void>((resolve) => (holder ? holder.close(() => resolve()) : resolve()));
});

test("PORT in use: the platform exits at once with status 1 and `cannot start: port <n> (PORT) is in use`", async () => {
	holder = net.createServer((s) => s.destroy());
	await new Promise<void>((resolve) => holder!.listen(0, "127.0.0.1", resolve));
	const port = (holder.address() as net.AddressInfo).port;

	node = startNode("busy-port", { PORT: String(port), MQTT_PORT: "0" });
	const started = Date.now();
	let timer: NodeJS.Timeout | undefined;
	const code = await Promise.race([node.exited, new Promise<"running">((r) => (timer = setTimeout(() => r("running"), EXIT_MS)))]);
	clearTimeout(timer);
	const lines = node
		.output()
		.split("\n")
		.map((l) => l.trim())
		.filter(Boolean);

	expect({ code, ms: Date.now() - started < EXIT_MS }).toEqual({ code: 1, ms: true });
	expect(lines[lines.length - 1]).toBe(`cannot start: port ${port} (PORT) is in use`);
	// Said once, before any service started: no stack trace, no error or warning line before it.
	expect(lines.filter((l) => /^at |EADDRINUSE| (ERROR|WARN) /.test(l))).toEqual([]);
	expect(lines.some((l) => /Service '\w+' started/.test(l))).toBe(false);
	// The port is still the other server's.
	expect(holder.listening).toBe(true);
});
