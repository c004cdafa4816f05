/**
 * Verification of the bcrypt hashes of earlier versions off the event loop: a small pool of worker threads, one per
 * core, each running bcryptjs synchronously. New hashes are Argon2id (lib/crypto.ts) and need no worker; a bcrypt hash
 * is replaced by one at its holder's next login, so the pool only starts (at its first job) in a process that still
 * verifies one. bcryptjs is pure JavaScript: in the main thread a cost-10 verification held the event loop for tens of
 * milliseconds; here it runs beside the event loop.
 */
import os from "os";
import { Worker } from "worker_threads";

type Job = { plain: string; hash: string };
interface Pending {
	job: Job;
	resolve: (v: boolean) => void;
	reject: (e: Error) => void;
}

// Runs as an eval'd CommonJS worker, so it needs no build step under tsx, jest or compiled output alike.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("worker_threads");
const bcrypt = require(workerData.bcrypt);
parentPort.on("message", (job) => {
	try {
		parentPort.postMessage({ ok: true, value: bcrypt.compareSync(job.plain, job.hash) });
	} catch (err) {
		parentPort.postMessage({ ok: false, message: String(err && err.message || err) });
	}
});`;

/** One thread per core: more would only share the same cores and add memory. */
export const HASH_WORKERS = Math.max(1, os.availableParallelism());

class Slot {
	private worker: Worker | null = null;
	busy: Pending | null = null;

	constructor(private readonly onFree: () => void) {}

	run(p: Pending): void {
		this.busy = p;
		const w = this.ensure();
		// Referenced while it works, so a script awaiting a hash does not exit under it; idle workers never hold a process.
		w.ref();
		w.postMessage(p.job);
	}

	private ensure(): Worker {
		if (this.worker) return this.worker;
		const w = new Worker(WORKER_SOURCE, { eval: true, workerData: { bcrypt: require.resolve("bcryptjs") } });
		w.on("message", (m: { ok: boolean; value?: boolean; message?: string }) => this.settle((p) => (m.ok ? p.resolve(m.value === true) : p.reject(new Error(m.message)))));
		// A dead worker fails its job (verifySecret answers false) and is replaced at the next job.
		const gone = (err: Error) => {
			if (this.worker === w) this.worker = null;
			this.settle((p) => p.reject(err));
		};
		w.on("error", gone);
		w.on("exit", (code) => gone(new Error(`hash worker exited with code ${code}`)));
		w.unref();
		this.worker = w;
		return w;
	}

	private settle(fn: (p: Pending) => void): void {
		const p = this.busy;
		if (!p) return;
		this.busy = null;
		this.worker?.unref();
		fn(p);
		this.onFree();
	}

	async close(): Promise<void> {
		const w = this.worker;
		this.worker = null;
		if (w) await w.terminate();
	}
}

export class HashWorkers {
	private readonly queue: Pending[] = [];
	private readonly slots: Slot[];

	constructor(size = HASH_WORKERS) {
		this.slots = Array.from({ length: size }, () => new Slot(() => this.drain()));
	}

	compare(plain: string, hash: string): Promise<boolean> {
		return new Promise((resolve, reject) => {
			this.queue.push({ job: { plain, hash }, resolve, reject });
			this.drain();
		});
	}

	/** Jobs waiting for a free worker (not counting the ones running). */
	get waiting(): number {
		return this.queue.length;
	}

	private drain(): void {
		for (const s of this.slots) {
			if (!this.queue.length) return;
			if (!s.busy) s.run(this.queue.shift() as Pending);
		}
	}

	/** Stops the threads (they are unreferenced when idle, so a process never waits for them; tests close them). */
	async close(): Promise<void> {
		await Promise.all(this.slots.map((s) => s.close()));
	}
}

let shared: HashWorkers | null = null;

/** The process's pool, made at its first bcrypt verification (its threads at their first jobs). */
export function hashWorkers(): HashWorkers {
	shared ??= new HashWorkers();
	return shared;
}
