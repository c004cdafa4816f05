/** What every bench scenario needs around a platform process: a free port, waiting for it, the root's token. */
import { spawn, type ChildProcess } from "child_process";
import { readFileSync } from "fs";
import { createServer, type AddressInfo } from "net";
import path from "path";

export function freePort(): Promise<number> {
	return new Promise((resolve) => {
		const s = createServer();
		s.listen(0, "127.0.0.1", () => {
			const p = (s.address() as AddressInfo).port;
			s.close(() => resolve(p));
		});
	});
}

/** Resolves once `url` answers below 500 (the platform is ready); throws after `ms`. */
export async function waitFor(url: string, ms = 30_000): Promise<void> {
	const until = Date.now() + ms;
	while (Date.now() < until) {
		try {
			if ((await fetch(url)).status < 500) return;
		} catch {
			/* not yet */
		}
		await new Promise((r) => setTimeout(r, 200));
	}
	throw new Error(`${url} did not answer`);
}

/** The seeded root user's access token, from the platform's DATA_DIR/bootstrap.json. */
export async function rootToken(base: string, dataDir: string): Promise<string> {
	const cred = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
	const r = (await fetch(`${base}/auth/token`, {
		method: "POST",
		headers: { "content-type": "application/json" },
		body: JSON.stringify({ grant_type: "password", client_id: cred.client_id, username: cred.username, password: cred.password }),
	}).then((x) => x.json())) as { data: { access_token: string } };
	return r.data.access_token;
}

/** The platform checkout a scenario runs (BENCH_PLATFORM_DIR: another worktree, for a before/after on one machine). */
export const PLATFORM_DIR = process.env.BENCH_PLATFORM_DIR ?? path.resolve(__dirname, "..");

/**
 * `start.ts` of PLATFORM_DIR in a child process with `env` on top of this one's (LOG_LEVEL warn); PROFILE=dir runs it
 * under `node --cpu-prof` into dir (read with bench/cpuprofile.ts).
 */
export function spawnPlatform(env: Record<string, string>): ChildProcess {
	const prof = process.env.PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${process.env.PROFILE}`] : [];
	return spawn(process.execPath, [...prof, "--import", "tsx", "start.ts"], {
		cwd: PLATFORM_DIR,
		env: { ...process.env, LOG_LEVEL: "warn", ...env },
		stdio: ["ignore", "ignore", "inherit"],
	});
}
