/** The platform as `npm start` runs it, in a child process, to measure what a (re)start costs in memory. */
import { spawn, type ChildProcess } from "child_process";
import { readFileSync } from "fs";
import net from "net";
import path from "path";
import { sleep } from "./wait";

export interface Child {
	proc: ChildProcess;
	url: string;
	/** Resident set size of the child now, in bytes (Linux /proc). */
	rss(): number;
	stop(): Promise<void>;
}

export function freePort(): Promise<number> {
	return new Promise((resolve, reject) => {
		const srv = net.createServer();
		srv.listen(0, "127.0.0.1", () => {
			const port = (srv.address() as net.AddressInfo).port;
			srv.close(() => resolve(port));
		});
		srv.on("error", reject);
	});
}

export function rssOf(pid: number): number {
	const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
	return m ? Number(m[1]) * 1024 : NaN;
}

/** `nodeArgs`: options for the child's node before the entry (e.g. a heap setting every measured child shares). */
export async function startChild(env: Record<string, string>, timeoutMs = 60_000, nodeArgs: string[] = []): Promise<Child> {
	const port = await freePort();
	const root = path.resolve(__dirname, "../..");
	const proc = spawn(process.execPath, ["--expose-gc", ...nodeArgs, "--import", "tsx", "start.ts"], {
		cwd: root,
		env: { ...process.env, LOG_LEVEL: "warn", HOST: "127.0.0.1", PORT: String(port), MQTT_PORT: "0", ...env },
		stdio: ["ignore", "ignore", "pipe"],
	});
	let err = "";
	proc.stderr!.on("data", (c) => (err = (err + c).slice(-4000)));
	const url = `http://127.0.0.1:${port}`;
	const until = Date.now() + timeoutMs;
	for (;;) {
		if (proc.exitCode !== null) throw new Error(`platform exited: ${err}`);
		try {
			if ((await fetch(`${url}/status`)).status < 600) break;
		} catch {
			/* not listening yet */
		}
		if (Date.now() > until) {
			proc.kill("SIGKILL");
			throw new Error(`platform did not answer: ${err}`);
		}
		await sleep(200);
	}
	return {
		proc,
		url,
		rss: () => rssOf(proc.pid!),
		stop: () =>
			new Promise<void>((resolve) => {
				if (proc.exitCode !== null) return resolve();
				const t = setTimeout(() => proc.kill("SIGKILL"), 10_000);
				proc.once("exit", () => {
					clearTimeout(t);
					resolve();
				});
				proc.kill("SIGTERM");
			}),
	};
}
