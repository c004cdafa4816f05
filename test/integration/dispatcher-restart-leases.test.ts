/**
 * A dispatcher killed while it holds deliveries takes them back as soon as it starts again: with the default node id
 * (stable across restarts and processes, runtime/failover.ts) its leases carry the id its next run has, and the next run releases
 * them at start instead of waiting out their 60 s. A lease of another node is left alone. The platform runs in this
 * process on a schema of its own on the local PostgreSQL; the kill is staged while the platform is stopped (a
 * clean stop gives its leases back itself): its pending rows are leased to it, as a run killed mid-delivery leaves
 * them. Skips with a message when PostgreSQL is down (fails under REQUIRE_SERVERS=1).
 */
import http from "http";
import { randomBytes } from "crypto";
import { Pool } from "pg";
import { bootPlatform, needServers, type TestPlatform } from "../helpers/platform";
import { freePort } from "../helpers/ports";
import { stableNodeId } from "../../runtime/failover";
import { sleep, waitForValue } from "../helpers/wait";

const servers = needServers(["PostgreSQL", 5432]);
const base = "postgres://postgres@127.0.0.1:5432/test";
const schema = `dispatcher_leases_${randomBytes(5).toString("hex")}`;

jest.setTimeout(90_000);

let admin: Pool | undefined;
let p: TestPlatform | undefined;
let server: http.Server | undefined;
let status = 503;
const received: string[] = [];

beforeAll(async () => {
	if (!servers.up) return;
	admin = new Pool({ connectionString: base, max: 2 });
	await admin.query(`create schema ${schema}`);
	server = http.createServer((req, res) => {
		let text = "";
		req.on("data", (c) => (text += c));
		req.on("end", () => {
			if (status === 200) received.push(JSON.parse(text).after?.title ?? JSON.parse(text).before?.title);
			res.writeHead(status).end();
		});
	});
	await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
	// A fixed port: the gateway's port is part of the default node id, and the restart must keep it.
	p = await bootPlatform({
		port: await freePort(),
		webhookAllowPrivate: true,
		// A failed first attempt waits an hour: the rows stay pending, not leased, until the staged kill.
		webhookRetrySchedule: [0, 3600],
		databaseUrl: `${base}?options=${encodeURIComponent(`-c search_path=${schema}`)}`,
	});
}, 60_000);

afterAll(async () => {
	await p?.cleanup();
	await new Promise((r) => (server ? server.close(r) : r(undefined)));
	if (admin) {
		await admin.query(`drop schema if exists ${schema} cascade`);
		await admin.end();
	}
});

servers.test("a restarted dispatcher takes back its own leases at start; another node's lease waits", async () => {
	const token = await p!.rootToken();
	const url = `http://127.0.0.1:${(server!.address() as { port: number }).port}/hook`;
	expect((await p!.http("POST", "/context/configs", { token, body: { key: "CQRS", eid: p!.root.client_id, value: { webhook: url } } })).status).toBe(200);
	for (const title of ["mine", "theirs"]) expect((await p!.http("POST", "/content/notes", { token, body: { title } })).status).toBe(200);
	// Both first attempts failed (503): pending, due in an hour.
	await waitForValue("two failed first attempts", async () => {
		// (The config's own creation is a change event too: a third row, left due in an hour.)
		const r = await admin!.query(
			`select count(*)::int as n from ${schema}.deliveries where status = 'pending' and attempts = 1 and payload::jsonb -> 'after' ->> 'title' in ('mine', 'theirs')`,
		);
		return r.rows[0].n === 2;
	});
	const nodeId = p!.broker.nodeID;
	// The default id, which a new process with the same settings has too (test/e2e/failover.test.ts restarts one).
	expect(nodeId).toBe(stableNodeId(p!.cfg));
	await p!.stop();
	// What a run killed mid-delivery leaves: rows due now, leased for another minute (one to this node, one to another).
	const lease = (title: string, owner: string) =>
		admin!.query(`update ${schema}.deliveries set next_at = now(), locked_by = $1, locked_until = now() + interval '60 seconds' where payload::jsonb -> 'after' ->> 'title' = $2`, [
			owner,
			title,
		]);
	expect((await lease("mine", nodeId)).rowCount).toBe(1);
	expect((await lease("theirs", "another-node")).rowCount).toBe(1);
	status = 200;
	const restartedAt = Date.now();
	await p!.restart();
	expect(p!.broker.nodeID).toBe(nodeId);
	await waitForValue("the node's own delivery", async () => received.includes("mine"), 10_000);
	const tookMs = Date.now() - restartedAt;
	await sleep(1000);
	expect(received).toEqual(["mine"]);
	console.log(`own lease taken back and delivered ${tookMs} ms after the restart began (lease 60 s; loaded machine)`);
	expect(tookMs).toBeLessThan(10_000);
});
