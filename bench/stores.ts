/**
 * The document store on its own platform (`npm run bench`, or alone with `npx tsx bench/stores.ts`): PostgreSQL
 * (BENCH_DATABASE_URL, else the embedded PostgreSQL), seeded with 10 000 notes; get by id, root's list of 20 with a
 * different query every request (filter on `tags` and `props.n`, sort, exact total), and create, through the full
 * pipeline.
 */
import { spawn, type ChildProcess } from "child_process";
import { mkdtempSync, rmSync } from "fs";
import os from "os";
import path from "path";
import autocannon from "autocannon";
import { freePort, quiet, rootToken, waitFor } from "./process";

const ROOT = path.resolve(__dirname, "..");
const DURATION = Number(process.env.BENCH_DURATION ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const DOCS = 10_000;

export interface StoreRow {
	name: string;
	rps: number;
	p99: number;
}

async function run(opts: autocannon.Options): Promise<{ rps: number; p99: number }> {
	const r = await autocannon({ connections: CONNECTIONS, duration: DURATION, ...opts });
	if (r.non2xx || r.errors) console.warn(`${opts.url}: ${r.non2xx} non-2xx, ${r.errors} errors`);
	return { rps: Math.round(r.requests.average), p99: r.latency.p99 };
}

async function scenarios(): Promise<Record<string, { rps: number; p99: number }>> {
	const store = "postgres";
	const dataDir = mkdtempSync(path.join(os.tmpdir(), `bench-${store}-`));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const env: Record<string, string> = { ...(process.env as Record<string, string>), LOG_LEVEL: "warn", PORT: String(port), DATA_DIR: dataDir };
	delete env.DOCUMENT_STORE;
	delete env.DATABASE_URL;
	if (process.env.BENCH_DATABASE_URL) env.DATABASE_URL = process.env.BENCH_DATABASE_URL;
	const child: ChildProcess = spawn(path.join(ROOT, "node_modules/.bin/tsx"), ["start.ts"], { cwd: ROOT, env, stdio: ["ignore", "ignore", "inherit"], detached: true });
	try {
		await waitFor(`${base}/status`, 120_000);
		const auth = { authorization: `Bearer ${await rootToken(base, dataDir)}`, "content-type": "application/json" };
		for (let i = 0; i < DOCS; i += 1000) {
			const items = Array.from({ length: 1000 }, (_, j) => ({ title: `note ${i + j}`, content: "x".repeat(200), tags: [(i + j) % 2 ? "odd" : "even"], props: { n: i + j } }));
			const r = await fetch(`${base}/content/notes/bulk`, { method: "POST", headers: auth, body: JSON.stringify({ items }) });
			if (r.status !== 200) throw new Error(`seeding failed: ${r.status} ${await r.text()}`);
		}
		console.log(`${store}: seeded; the workers handled the seed's events in ${await quiet(child.pid!)} ms`);
		const one = (await fetch(`${base}/content/notes?pagination=${encodeURIComponent(JSON.stringify({ limit: 1 }))}`, { headers: auth }).then((r) => r.json())) as {
			items: Array<{ id: string }>;
		};
		const pag = encodeURIComponent(JSON.stringify({ limit: 20, sort: { created_at: -1 } }));
		const out: Record<string, { rps: number; p99: number }> = {};
		out.get = await run({ url: `${base}/content/notes/${one.items[0].id}`, headers: auth });
		out.list = await run({
			url: `${base}/content/notes`,
			headers: auth,
			requests: [
				{
					setupRequest: (req) => ({
						...req,
						path: `/content/notes?query=${encodeURIComponent(JSON.stringify({ tags: "odd", "props.n": { $gte: Math.floor(Math.random() * DOCS) } }))}&pagination=${pag}`,
					}),
				},
			],
		});
		out.create = await run({ url: `${base}/content/notes`, method: "POST", headers: auth, body: JSON.stringify({ title: "bench", content: "x".repeat(200) }) });
		for (const [k, v] of Object.entries(out)) console.log(`${store}: ${k}: ${v.rps} req/s, p99 ${v.p99} ms`);
		return out;
	} finally {
		try {
			process.kill(child.pid!, "SIGTERM");
		} catch {
			/* gone */
		}
		await new Promise((r) => child.once("exit", r).once("error", r));
		rmSync(dataDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
	}
}

export async function storesBench(): Promise<StoreRow[]> {
	const postgres = await scenarios();
	const names: Record<string, string> = {
		get: "get by id",
		list: "list 20 of 10 000 as root, a different query every request (filter + sort)",
		create: "create (document and change event)",
	};
	return Object.keys(names).map((k) => ({ name: names[k], ...postgres[k] }));
}

export function storesReport(rows: StoreRow[]): string[] {
	return [
		`| Document store: PostgreSQL (${DOCS.toLocaleString("en")} notes, full pipeline) | req/s | p99 ms |`,
		"|---|---:|---:|",
		...rows.map((r) => `| ${r.name} | ${r.rps} | ${r.p99} |`),
		"",
		`PostgreSQL: ${process.env.BENCH_DATABASE_URL ? "the server at BENCH_DATABASE_URL" : "the embedded PostgreSQL"}, documents as JSONB, the list's filter as parameterised SQL (GIN containment for \`tags\`, a JSON path for \`props.n\`), its page and exact \`total\` from one statement that evaluates the filter once on every match (half of the 10 000 notes): that evaluation, about 1 to 3 µs of server time per matching row, bounds the list (see "Profile" below). Every create commits the document and its change event in one transaction. The store is measured once its workers have handled the seed's change events (at most 60 s of waiting).`,
		"",
	];
}

if (require.main === module) {
	storesBench().then(
		(rows) => console.log(storesReport(rows).join("\n")),
		(err) => {
			console.error(err);
			process.exit(1);
		},
	);
}
