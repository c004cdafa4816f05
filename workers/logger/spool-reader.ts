/**
 * The logger's reader of the embedded audit spool (EVENT_STREAM=outbox, events/audit-spool.ts): takes stored batches,
 * hands them to `store` together, and removes them only once stored. A logger killed in between takes them again
 * (at least once; the insert is idempotent by request id). An idle reader wakes at once on an append of this process,
 * else polls.
 */
import type { StoreConfig } from "../../stores";
import { nap } from "../../runtime/nap";
import { sharedAuditSpool, type AuditBatch, type AuditSpool } from "../../events/audit-spool";

const POLL_MS = 200;
/**
 * After a take that was not full, the reader lets batches gather this long before the next one: a burst of requests
 * becomes a few large inserts rather than one per gateway batch. Appends wake only an idle (empty-spool) reader.
 */
const GATHER_MS = 100;
/** Batches taken at once (a gateway batch holds up to 200 entries). */
const TAKE = 20;
const RETRY_MS = [200, 1000, 5000];

export class SpoolReader {
	private spool: AuditSpool;
	private stopped = false;
	private wake?: () => void;
	private loop?: Promise<void>;
	private idle = false;
	private onAppend = () => {
		if (this.idle) this.wake?.();
	};
	/** Batches stored and removed so far (tests, operators). */
	taken = 0;

	constructor(
		cfg: StoreConfig,
		private readonly store: (batch: AuditBatch) => Promise<void>,
		private readonly warn: (msg: string) => void,
	) {
		this.spool = sharedAuditSpool(cfg);
	}

	start(): this {
		this.spool.on("appended", this.onAppend);
		this.loop = this.run();
		return this;
	}

	private sleep(ms: number): Promise<void> {
		return nap(ms, (w) => (this.wake = w));
	}

	private async run(): Promise<void> {
		let failures = 0;
		await this.spool.connect().catch(() => undefined);
		while (!this.stopped) {
			try {
				const batches = await this.spool.take(TAKE);
				if (!batches.length) {
					this.idle = true;
					await this.sleep(POLL_MS);
					this.idle = false;
					continue;
				}
				await Promise.all(batches.map((b) => this.store(b)));
				await this.spool.remove(batches.map((b) => b.id));
				this.taken += batches.length;
				failures = 0;
				if (batches.length < TAKE) await this.sleep(GATHER_MS);
			} catch (err) {
				if (failures++ % 20 === 0) this.warn(`audit spool: ${(err as Error)?.message ?? err}; retrying`);
				await this.sleep(RETRY_MS[Math.min(failures - 1, RETRY_MS.length - 1)]);
			}
		}
	}

	async stop(): Promise<void> {
		this.stopped = true;
		this.spool.off("appended", this.onAppend);
		this.wake?.();
		await this.loop;
		await this.spool.disconnect().catch(() => undefined);
	}
}
