/**
 * The files scenario of `npm run bench`: upload and download throughput (MiB/s) through the gateway, with the
 * content streamed to and from the blob store (local files by default). `npx tsx bench/files.ts` runs it alone
 * against a fresh platform child process.
 */
import http from "http";
import { spawn } from "child_process";
import { mkdtempSync } from "fs";
import os from "os";
import path from "path";
import { freePort, rootToken, waitFor, stopPlatform } from "./process";

export interface FileRow {
	/** Bytes per file. */
	size: number;
	clients: number;
	uploads: number;
	uploadMiBs: number;
	downloads: number;
	downloadMiBs: number;
	errors: number;
}

const MiB = 1024 * 1024;

function uploadOnce(base: string, token: string, size: number): Promise<string> {
	const boundary = `----bench${Math.random().toString(16).slice(2)}`;
	const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`);
	const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
	const u = new URL(`${base}/special/files/upload`);
	return new Promise((resolve, reject) => {
		const req = http.request(
			{
				host: u.hostname,
				port: u.port,
				path: u.pathname,
				method: "POST",
				headers: { authorization: `Bearer ${token}`, "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(head.length + size + tail.length) },
			},
			(res) => {
				const chunks: Buffer[] = [];
				res.on("data", (c) => chunks.push(c));
				res.on("end", () => {
					if (res.statusCode !== 200) return reject(new Error(`upload ${res.statusCode}: ${Buffer.concat(chunks)}`));
					resolve(JSON.parse(Buffer.concat(chunks).toString()).items[0].id);
				});
			},
		);
		req.on("error", reject);
		const chunk = Buffer.alloc(64 * 1024, 0x5a);
		let sent = 0;
		req.write(head);
		const pump = () => {
			while (sent < size) {
				const n = Math.min(chunk.length, size - sent);
				sent += n;
				if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void req.once("drain", pump);
			}
			req.end(tail);
		};
		pump();
	});
}

function downloadOnce(base: string, token: string, id: string): Promise<number> {
	return new Promise((resolve, reject) => {
		http
			.get(`${base}/special/files/${id}/download`, { headers: { authorization: `Bearer ${token}` } }, (res) => {
				let n = 0;
				res.on("data", (c: Buffer) => (n += c.length));
				res.on("end", () => (res.statusCode === 200 ? resolve(n) : reject(new Error(`download ${res.statusCode}`))));
			})
			.on("error", reject);
	});
}

/** `clients` parallel clients upload `size`-byte files for `durationS`, then download them for `durationS`. */
export async function fileBench(base: string, token: string, durationS: number, clients = 4, size = 5 * MiB): Promise<FileRow> {
	const ids: string[] = [];
	let errors = 0;
	let until = Date.now() + durationS * 1000;
	let t0 = Date.now();
	await Promise.all(
		Array.from({ length: clients }, async () => {
			while (Date.now() < until) {
				try {
					ids.push(await uploadOnce(base, token, size));
				} catch {
					errors++;
				}
			}
		}),
	);
	const upSecs = (Date.now() - t0) / 1000;
	let downloads = 0;
	let bytes = 0;
	until = Date.now() + durationS * 1000;
	t0 = Date.now();
	await Promise.all(
		Array.from({ length: clients }, async (_, c) => {
			for (let i = c; Date.now() < until && ids.length; i += clients) {
				try {
					bytes += await downloadOnce(base, token, ids[i % ids.length]);
					downloads++;
				} catch {
					errors++;
				}
			}
		}),
	);
	const downSecs = (Date.now() - t0) / 1000;
	const r1 = (x: number) => Math.round(x * 10) / 10;
	return { size, clients, uploads: ids.length, uploadMiBs: r1((ids.length * size) / MiB / upSecs), downloads, downloadMiBs: r1(bytes / MiB / downSecs), errors };
}

/** Alone: a fresh platform child process on a free port, then the scenario once. */
async function alone() {
	const root = path.resolve(__dirname, "..");
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-files-"));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child = spawn(path.join(root, "node_modules/.bin/tsx"), ["start.ts"], {
		cwd: root,
		env: { ...process.env, PORT: String(port), DATA_DIR: dataDir, LOG_LEVEL: "warn" },
		stdio: ["ignore", "ignore", "inherit"],
	});
	try {
		await waitFor(`${base}/status`);
		const token = await rootToken(base, dataDir);
		const row = await fileBench(base, token, Number(process.env.BENCH_DURATION ?? 10));
		console.log(JSON.stringify(row));
	} finally {
		await stopPlatform(child, dataDir);
	}
}

if (require.main === module)
	alone().catch((err) => {
		console.error(err);
		process.exit(1);
	});
