/**
 * Nodes whose clocks disagree (issue "Operating it", item 1c), on both document stores: node A runs every service and
 * a gateway, node B only a gateway with TOKEN_LEEWAY_SECONDS=600, over an in-process transporter.
 * - A token whose `iat` or `nbf` lies ahead of a gateway's clock within the leeway (60 s by default) is accepted;
 *   beyond it the answer is 401 `token not yet valid` (before: accepted, however far ahead).
 * - Each node exposes how far each peer's clock is from its own: `platform_clock_skew_seconds{peer}`, measured from
 *   the time the peer puts in its PONG (here a peer whose clock runs 20 minutes ahead).
 */
import { randomBytes } from "crypto";
import { copyFileSync, rmSync } from "fs";
import path from "path";
import jwt from "jsonwebtoken";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { errorBody } from "../helpers/auth";
import { waitForValue } from "../helpers/wait";
import { startPlatform, type Platform } from "../../platform";
import { loadKeys } from "../../runtime/config";

const TWENTY_MINUTES_MS = 20 * 60_000;

describe("clocks of two nodes", () => {
	const id = randomBytes(4).toString("hex");
	let a: TestPlatform;
	let b: Platform;
	const bDir = tempDir("skew-gateway-");

	beforeAll(async () => {
		a = await bootPlatform({ transporter: "Fake", namespace: `skew-${id}`, nodeId: `a-${id}` });
		// B's own DATA_DIR (one process per DATA_DIR), with the deployment's keys.
		copyFileSync(path.join(a.dataDir, "keys.json"), path.join(bDir, "keys.json"));
		b = await startPlatform({ ...a.cfg, dataDir: bDir, services: ["api"], nodeId: `b-${id}`, port: 0, tokenLeewaySec: 600 });
		await b.broker.waitForServices(["auth", "identity", "domain", "content"], 20_000);
	}, 120_000);
	afterAll(async () => {
		await b?.stop();
		await a?.cleanup();
		rmSync(bDir, { recursive: true, force: true });
	});

	/** The root's token signed again with its `iat` (and `exp` after it) moved by `shiftSec`, plus `extra` claims. */
	async function shifted(shiftSec: number, extra: Record<string, unknown> = {}): Promise<string> {
		const token = await a.rootToken();
		const claims = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString("utf8"));
		const now = Math.floor(Date.now() / 1000);
		return jwt.sign({ ...claims, iat: now + shiftSec, exp: now + shiftSec + 900, ...extra }, loadKeys(a.cfg).jwtSecret, { algorithm: "HS256" });
	}
	const list = (url: string, token: string) =>
		fetch(`${url}/content/notes`, { headers: { authorization: `Bearer ${token}` } }).then(async (r) => ({ status: r.status, body: await r.json() }));

	test("iat and nbf ahead of the gateway's clock: accepted within the leeway, 401 `token not yet valid` beyond", async () => {
		const NOT_YET = { status: 401, body: errorBody(401, "token not yet valid") };
		// Gateway A, default leeway (60 s).
		expect((await list(a.url, await shifted(30))).status).toBe(200);
		expect(await list(a.url, await shifted(300))).toEqual(NOT_YET);
		expect(await list(a.url, await shifted(0, { nbf: Math.floor(Date.now() / 1000) + 300 }))).toEqual(NOT_YET);
		expect((await list(a.url, await shifted(0, { nbf: Math.floor(Date.now() / 1000) + 30 }))).status).toBe(200);
		// Gateway B, TOKEN_LEEWAY_SECONDS=600.
		expect((await list(b.url!, await shifted(300))).status).toBe(200);
		expect(await list(b.url!, await shifted(900))).toEqual(NOT_YET);
		// An expired token keeps the spec's answer.
		expect(await list(a.url, await shifted(-1000))).toEqual({ status: 401, body: errorBody(401, "authorization token is required") });
	});

	test("a peer whose clock runs 20 minutes ahead shows in platform_clock_skew_seconds{peer}", async () => {
		// B reports its time 20 minutes ahead in every PONG it sends.
		const transit = b.broker.transit as unknown as { publish(packet: { type: string; payload: { arrived?: number } }): Promise<unknown> };
		const publish = transit.publish.bind(transit);
		transit.publish = (packet) => {
			if (packet.type === "PONG") packet.payload.arrived! += TWENTY_MINUTES_MS;
			return publish(packet);
		};
		const series = new RegExp(`^platform_clock_skew_seconds\\{[^}]*peer="${b.broker.nodeID}"[^}]*\\} (\\S+)$`, "m");
		const skew = await waitForValue("A's measure of B's clock", async () => {
			await a.broker.ping(b.broker.nodeID, 2000);
			const m = series.exec((await a.http("GET", "/metrics")).text);
			return m && Number(m[1]) > 600 && Number(m[1]);
		});
		expect(Math.abs(skew - TWENTY_MINUTES_MS / 1000)).toBeLessThan(5);
		expect((await a.http("GET", "/metrics")).text).toMatch(/^# TYPE platform_clock_skew_seconds gauge$/m);
		// A's clock, as B sees it (B's own clock is the real one): no skew.
		await b.broker.ping(a.broker.nodeID, 2000);
		const fromB = await waitForValue("B's measure of A's clock", async () =>
			new RegExp(`^platform_clock_skew_seconds\\{[^}]*peer="${a.broker.nodeID}"[^}]*\\} (\\S+)$`, "m").exec((await fetch(`${b.url}/metrics`).then((r) => r.text())) ?? ""),
		);
		expect(Math.abs(Number(fromB[1]))).toBeLessThan(5);
	});
});
