/**
 * Search scenario (issue 12): 10 000 posts with text drawn from a fixed 2 000-word vocabulary, then
 * `GET /content/posts/search` with a different query every request:
 * - a word of the vocabulary (about 135 matching posts on average) per request: the typical search;
 * - a word every other post holds (5 000 matches), first page of 20: the worst case, since every candidate is
 *   checked against the caller's view to give an exact `total`.
 * Run alone: `npx tsx bench/search.ts` (starts its own platform); `npm run bench` runs it with the rest.
 */
import autocannon from "autocannon";
import { rootToken, runAlone } from "./process";

export const SEARCH_DOCS = 10_000;
const VOCAB = Array.from({ length: 2000 }, (_, i) => `w${i.toString(36)}x`);

/** Deterministic pseudo-random words (mulberry32). */
function words(seed: number, n: number): string[] {
	const out: string[] = [];
	let a = seed >>> 0;
	for (let i = 0; i < n; i++) {
		a = (a + 0x6d2b79f5) >>> 0;
		let t = Math.imul(a ^ (a >>> 15), 1 | a);
		t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
		out.push(VOCAB[((t ^ (t >>> 14)) >>> 0) % VOCAB.length]);
	}
	return out;
}

export interface SearchRow {
	name: string;
	rps: number;
	p50: number;
	p99: number;
	note?: string;
}

export async function seedPosts(base: string, auth: Record<string, string>): Promise<void> {
	for (let i = 0; i < SEARCH_DOCS; i += 1000) {
		const items = Array.from({ length: 1000 }, (_, j) => {
			const n = i + j;
			return { title: `post ${n} ${words(n, 2).join(" ")}`, content: `${words(n + 7919, 25).join(" ")}${n % 2 ? " common" : ""}`, status: "PUBLISHED" };
		});
		const r = await fetch(`${base}/content/posts/bulk`, { method: "POST", headers: auth, body: JSON.stringify({ items }) });
		if (r.status !== 200) throw new Error(`seeding posts failed: ${r.status} ${await r.text()}`);
	}
}

export async function searchBench(base: string, auth: Record<string, string>, duration: number, connections: number): Promise<SearchRow[]> {
	await seedPosts(base, auth);
	// The index follows the bulk writes through the outbox: wait until the last post is searchable.
	const last = `post ${SEARCH_DOCS - 1}`;
	for (const until = Date.now() + 30_000; Date.now() < until; await new Promise((r) => setTimeout(r, 200))) {
		const r = (await fetch(`${base}/content/posts/search?q=${encodeURIComponent(String(SEARCH_DOCS - 1))}`, { headers: auth }).then((x) => x.json())) as {
			items?: Array<{ title?: unknown }>;
		};
		if (r.items?.some((d) => String(d.title).startsWith(last))) break;
	}
	// The workers drain the 10 000 creates (the observer counts them): measured once they are done, not against them.
	for (const until = Date.now() + 120_000; Date.now() < until; await new Promise((r) => setTimeout(r, 500))) {
		const r = (await fetch(`${base}/special/stats/collect?zone=client`, {
			method: "POST",
			headers: auth,
			body: JSON.stringify({ period: "yearly", service: "content", collection: "posts" }),
		}).then((x) => x.json())) as { items?: Array<{ created?: number }> };
		if ((r.items?.[0]?.created ?? 0) >= SEARCH_DOCS) break;
	}
	const rows: SearchRow[] = [];
	const page = encodeURIComponent(JSON.stringify({ limit: 20 }));
	const run = async (name: string, pathOf: () => string, note: string) => {
		const r = await autocannon({ url: base, connections, duration, headers: auth, requests: [{ setupRequest: (req) => ({ ...req, path: pathOf() }) }] });
		if (r.non2xx || r.errors) console.warn(`${name}: ${r.non2xx} non-2xx, ${r.errors} errors`);
		const row = { name, rps: Math.round(r.requests.average), p50: r.latency.p50, p99: r.latency.p99, note };
		console.log(`${name}: ${row.rps} req/s p50 ${row.p50} ms p99 ${row.p99} ms`);
		rows.push(row);
	};
	await run(
		"search 10 000 posts, one word (about 135 matches), a different word every request",
		() => `/content/posts/search?q=${VOCAB[Math.floor(Math.random() * VOCAB.length)]}&pagination=${page}`,
		"rank, view check of every candidate, page of 20",
	);
	await run(
		"search 10 000 posts, two words one of which 5 000 posts hold, first page of 20",
		() => `/content/posts/search?q=${encodeURIComponent(`${VOCAB[Math.floor(Math.random() * VOCAB.length)]} common`)}&pagination=${page}`,
		"worst case: 5 000 candidates checked for an exact total",
	);
	return rows;
}

if (require.main === module)
	runAlone("search", async (base, dataDir) => {
		const auth = { authorization: `Bearer ${await rootToken(base, dataDir)}`, "content-type": "application/json" };
		await searchBench(base, auth, Number(process.env.BENCH_DURATION ?? 10), Number(process.env.BENCH_CONNECTIONS ?? 50));
	});
