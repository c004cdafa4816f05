/**
 * bcrypt off the event loop: a small pool of worker threads, one per core, each running bcryptjs synchronously.
 * bcryptjs is pure JavaScript: in the main thread a cost-10 hash held the event loop for tens of milliseconds and
 * every login of a node ran on one core. Here the hash runs beside the event loop and logins use every core.
 * The hash itself is unchanged (same library, same output), so stored hashes stay valid as they are.
 */
import os from "os";
import { Worker } from "worker_threads";

type Job = { op: "hash"; plain: string; cost: number } | { op: "compare"; plain: string; hash: string };
interface Pending {
	job: Job;
	resolve: (v: string | boolean) => void;
	reject: (e: Error) => void;
}

// Runs as an eval'd CommonJS worker, so it needs no build step under tsx, jest or compiled output alike.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("worker_threads");
const bcrypt = require(workerData.bcrypt);
parentPort.on("message", (job) => {
	try {
		const value = job.op === "hash" ? bcrypt.hashSync(job.plain, job.cost) : bcrypt.compareSync(job.plain, job.hash);
		parentPort.postMessage({ ok: true, value });
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
		w.on("message", (m: { ok: boolean; value?: string | boolean; message?: string }) => this.settle((p) => (m.ok ? p.resolve(m.value as string | boolean) : p.reject(new Error(m.message)))));
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

	hash(plain: string, cost: number): Promise<string> {
		// bcryptjs would clamp a cost above 31 to 31: a job that never ends and holds its worker.
		if (!Number.isInteger(cost) || cost < 4 || cost > 31) return Promise.reject(new Error(`bcrypt cost ${cost} is outside 4..31`));
		return this.submit({ op: "hash", plain, cost }) as Promise<string>;
	}

	compare(plain: string, hash: string): Promise<boolean> {
		return this.submit({ op: "compare", plain, hash }) as Promise<boolean>;
	}

	/** Jobs waiting for a free worker (not counting the ones running). */
	get waiting(): number {
		return this.queue.length;
	}

	private submit(job: Job): Promise<string | boolean> {
		return new Promise((resolve, reject) => {
			this.queue.push({ job, resolve, reject });
			this.drain();
		});
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

/** The process's pool, started at its first hash. */
export function hashWorkers(): HashWorkers {
	shared ??= new HashWorkers();
	return shared;
}
