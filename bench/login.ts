/**
 * Login scenario (issue 15): `POST /auth/token` password grant as the root user, 10 connections, from one
 * forwarded address (`x-forwarded-for` is ignored without TRUST_PROXY; every login succeeds, so the failed-login
 * limit never applies). Run alone: `npx tsx bench/login.ts` (starts its own platform); `npm run bench` runs it with
 * the rest. `BENCH_PLATFORM_DIR=<checkout>` runs the platform of another checkout, for before/after runs of one session.
 */
import autocannon from "autocannon";
import { readFileSync } from "fs";
import path from "path";
import { runAlone } from "./process";

export interface LoginRow {
	name: string;
	rps: number;
	p50: number;
	p99: number;
	note: string;
}

export const LOGIN_CONNECTIONS = 10;

export async function loginBench(base: string, root: { client_id: string; username: string; password: string }, duration: number): Promise<LoginRow> {
	const r = await autocannon({
		url: `${base}/auth/token`,
		method: "POST",
		headers: { "content-type": "application/json", "x-forwarded-for": "bench" },
		body: JSON.stringify({ grant_type: "password", client_id: root.client_id, username: root.username, password: root.password }),
		connections: LOGIN_CONNECTIONS,
		duration,
	});
	if (r.non2xx || r.errors) console.warn(`login: ${r.non2xx} non-2xx, ${r.errors} errors`);
	const row = {
		name: "login: password grant (argon2id m=19 MiB t=2 p=1)",
		rps: Math.round(r.requests.average),
		p50: r.latency.p50,
		p99: r.latency.p99,
		note: `${LOGIN_CONNECTIONS} connections`,
	};
	console.log(`${row.name}: ${row.rps} req/s p50 ${row.p50} ms p99 ${row.p99} ms`);
	return row;
}

if (require.main === module)
	runAlone("login", async (base, dataDir) => {
		const root = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
		await loginBench(base, root, Number(process.env.BENCH_DURATION ?? 10));
	});
