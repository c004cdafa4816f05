/**
 * The e-mail scenario of `npm run bench`: emails sent through POST /touch/emails/send for `durationS` by parallel
 * clients, delivered by the publisher over SMTP to an smtp-server in this process (answers at once). Measures the
 * messages received per second and the delay from the start of the send request to the receipt at the SMTP server
 * (p50, p99), the whole path: gateway, record, change stream, publisher claim, SMTP, settle. `npx tsx bench/email.ts`
 * runs it alone against a fresh platform child process.
 */
import { spawn, type ChildProcess } from "child_process";
import { mkdtempSync, rmSync } from "fs";
import type { AddressInfo } from "net";
import os from "os";
import path from "path";
import { SMTPServer } from "smtp-server";
import { freePort, rootToken, waitFor, stopPlatform } from "./process";

export interface EmailRow {
	clients: number;
	sent: number;
	received: number;
	perSecond: number;
	p50: number;
	p99: number;
	errors: number;
}

export interface Receiver {
	port: number;
	/** Record id (X-Platform-Email) → time of receipt (end of DATA). */
	got: Map<string, number>;
	close(): Promise<void>;
}

/** An SMTP server on 127.0.0.1 that takes every message at once and notes when it arrived. */
export function smtpReceiver(): Promise<Receiver> {
	const got = new Map<string, number>();
	const s = new SMTPServer({
		disabledCommands: ["STARTTLS", "AUTH"],
		closeTimeout: 100,
		size: 1024 * 1024,
		onData(stream, _session, cb) {
			let head = "";
			stream.on("data", (c: Buffer) => {
				if (head.length < 4096) head += c.toString("latin1");
			});
			stream.on("end", () => {
				const id = /^X-Platform-Email: (\w+)/im.exec(head)?.[1];
				if (id && !got.has(id)) got.set(id, Date.now());
				cb();
			});
		},
		logger: false,
	});
	s.on("error", () => undefined); // a pooled connection reset when the platform stops
	return new Promise((resolve) =>
		s.listen(0, "127.0.0.1", () => resolve({ port: (s.server.address() as AddressInfo).port, got, close: () => new Promise<void>((r) => s.close(() => r())) })),
	);
}

const pct = (xs: number[], q: number) => (xs.length ? xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] : 0);

/** `clients` parallel senders for `durationS`, then up to 60 s for the rest to arrive. */
export async function emailBench(base: string, token: string, rx: Receiver, durationS: number, clients = 10): Promise<EmailRow> {
	const started = new Map<string, number>();
	let errors = 0;
	const t0 = Date.now();
	const until = t0 + durationS * 1000;
	await Promise.all(
		Array.from({ length: clients }, async (_, c) => {
			for (let n = 0; Date.now() < until; n++) {
				const at = Date.now();
				try {
					const r = await fetch(`${base}/touch/emails/send`, {
						method: "POST",
						headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
						body: JSON.stringify({ to: [`bench${c}@example.com`], from: "bench@example.com", subject: `bench ${c}/${n}`, text: "x".repeat(500) }),
					});
					const body = (await r.json()) as { data: { id: string } };
					if (r.status !== 200) throw new Error(String(r.status));
					started.set(body.data.id, at);
				} catch {
					errors++;
				}
			}
		}),
	);
	const drain = Date.now() + 60_000;
	while (Date.now() < drain && [...started.keys()].some((id) => !rx.got.has(id))) await new Promise((r) => setTimeout(r, 100));
	const delays = [...started.entries()]
		.filter(([id]) => rx.got.has(id))
		.map(([id, at]) => rx.got.get(id)! - at)
		.sort((a, b) => a - b);
	const last = Math.max(...[...started.keys()].map((id) => rx.got.get(id) ?? 0));
	return {
		clients,
		sent: started.size,
		received: delays.length,
		perSecond: Math.round((delays.length / ((last - t0) / 1000)) * 10) / 10,
		p50: pct(delays, 0.5),
		p99: pct(delays, 0.99),
		errors: errors + started.size - delays.length,
	};
}

/** A fresh platform child process (publisher included) whose SMTP_URL is a receiver in this process; the scenario once. */
export async function emailScenario(durationS: number, children: ChildProcess[] = [], dirs: string[] = []): Promise<EmailRow> {
	const root = path.resolve(__dirname, "..");
	const rx = await smtpReceiver();
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-email-"));
	dirs.push(dataDir);
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child = spawn(path.join(root, "node_modules/.bin/tsx"), ["start.ts"], {
		cwd: root,
		env: { ...process.env, PORT: String(port), DATA_DIR: dataDir, LOG_LEVEL: "warn", SMTP_URL: `smtp://127.0.0.1:${rx.port}`, TOUCH_EMAIL_SENDERS: "example.com" },
		stdio: ["ignore", "ignore", "inherit"],
	});
	children.push(child);
	try {
		await waitFor(`${base}/status`);
		const token = await rootToken(base, dataDir);
		return await emailBench(base, token, rx, durationS);
	} finally {
		await stopPlatform(child);
		await rx.close();
	}
}

if (require.main === module) {
	const dirs: string[] = [];
	emailScenario(Number(process.env.BENCH_DURATION ?? 10), [], dirs)
		.then((row) => console.log(JSON.stringify(row)))
		.catch((err) => {
			console.error(err);
			process.exitCode = 1;
		})
		.finally(() => {
			for (const d of dirs) rmSync(d, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
		});
}
