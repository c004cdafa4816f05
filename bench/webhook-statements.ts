/**
 * Where the webhook burst spends PostgreSQL's time (`npx tsx bench/webhook-statements.ts`): the scenario of
 * bench/webhooks.ts (burst and drain, no paced phase) on a platform whose embedded PostgreSQL preloads
 * pg_stat_statements, then every statement's calls and execution time per delivery. BENCH_PLATFORM_DIR runs another
 * checkout.
 */
import type { ChildProcess } from "child_process";
import { mkdtempSync, readFileSync } from "fs";
import os from "os";
import path from "path";
import { freePort, rootToken, spawnPlatform, waitFor, stopPlatform } from "./process";
import { PG_STATEMENTS_ARGS, statementsClient, topStatements } from "./pg-statements";
import { webhookBench } from "./webhooks";

async function main() {
	process.env.BENCH_WEBHOOK_PACED = "0";
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-hookstat-"));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child: ChildProcess = spawnPlatform({ PORT: String(port), DATA_DIR: dataDir, WEBHOOK_ALLOW_PRIVATE: "1", EMBEDDED_PG_ARGS: PG_STATEMENTS_ARGS });
	try {
		await waitFor(`${base}/status`, 120_000);
		const token = await rootToken(base, dataDir);
		const clientId = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8")).client_id as string;
		// /status answers before the dispatcher has started the embedded PostgreSQL: wait for its server.
		let db: Awaited<ReturnType<typeof statementsClient>> | undefined;
		for (let i = 0; !db; i++)
			db = await statementsClient(dataDir).catch(async (err) => {
				if (i >= 120) throw err;
				await new Promise((res) => setTimeout(res, 500));
				return undefined;
			});
		const r = await webhookBench(base, token, clientId, child.pid, true);
		const n = r.burst.deliveries + (r.drain?.deliveries ?? 0);
		const { total, lines } = await topStatements(db, n);
		await db.end();
		console.log(
			JSON.stringify({ platform: process.env.BENCH_PLATFORM_DIR ?? "this checkout", burst: r.burst, drain: r.drain, statementsPerDelivery: Math.round((total / n) * 100) / 100 }),
		);
		for (const l of lines) console.log(l.replace("calls/req", "calls/delivery").replace("µs/req", "µs/delivery"));
	} finally {
		await stopPlatform(child, dataDir);
	}
}

if (require.main === module)
	main().catch((err) => {
		console.error(err);
		process.exit(1);
	});
