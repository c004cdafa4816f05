/**
 * A unit of work: the statements of one write action and its change events commit in one PostgreSQL transaction.
 *
 * The collection engine runs each action inside `unitOfWork` (one line in mixins/collection.mixin.ts). The document
 * store's writes in that scope open a transaction lazily, on one pooled connection per database; reads in the scope
 * see those writes. The outbox's append (events/outbox.ts) inserts the events on the same connection and commits
 * (`commitUnit`): the documents and their events are durable together or not at all. Whatever the action writes
 * afterwards (hooks) opens a new transaction, committed when the action returns; an action that throws rolls back
 * what is not committed yet. Stores without transactions (NeDB, MongoDB) ignore the scope: their behaviour is
 * unchanged (write, then append).
 *
 * Scopes do not nest: an action called from inside another one (a local `ctx.call`) gets a unit of its own.
 */
import { AsyncLocalStorage } from "async_hooks";
import type { PoolClient } from "pg";

interface Tx {
	client: Promise<PoolClient>;
}

export interface Unit {
	open: boolean;
	txs: Map<object, Tx>;
}

const als = new AsyncLocalStorage<Unit>();

/** A database a unit can hold a transaction on: the key of its connection in the unit. */
export interface Transactional {
	client(): Promise<PoolClient>;
}

export async function unitOfWork<T>(fn: () => Promise<T>): Promise<T> {
	const unit: Unit = { open: true, txs: new Map() };
	return als.run(unit, async () => {
		let out: T;
		try {
			out = await fn();
		} catch (err) {
			await finish(unit, false);
			throw err;
		}
		await finish(unit, true);
		return out;
	});
}

async function finish(unit: Unit, commit: boolean): Promise<void> {
	unit.open = false;
	const txs = [...unit.txs.values()];
	unit.txs.clear();
	let failure: unknown;
	for (const tx of txs) {
		const client = await tx.client.catch(() => undefined);
		if (!client) continue;
		try {
			await client.query(commit ? "commit" : "rollback");
			client.release();
		} catch (err) {
			failure ??= err;
			client.release(err as Error);
		}
	}
	if (failure && commit) throw failure;
}

/** The current unit's open transaction on `db`, if a write in this scope began one. */
export function openTransaction(db: Transactional): Promise<PoolClient> | undefined {
	const unit = als.getStore();
	return unit?.open ? unit.txs.get(db)?.client : undefined;
}

/** Whether the caller runs in an open unit of work (its writes would join a transaction). */
export function inUnit(): boolean {
	return !!als.getStore()?.open;
}

/** The current unit's transaction on `db`, begun now if needed; undefined outside a unit. */
export function unitTransaction(db: Transactional): Promise<PoolClient> | undefined {
	const unit = als.getStore();
	if (!unit?.open) return undefined;
	let tx = unit.txs.get(db);
	if (!tx) {
		tx = {
			client: (async () => {
				const c = await db.client();
				try {
					await c.query("begin");
				} catch (err) {
					c.release(err as Error);
					throw err;
				}
				return c;
			})(),
		};
		unit.txs.set(db, tx);
		// A failed begin must not stay in the unit.
		tx.client.catch(() => unit.txs.delete(db));
	}
	return tx.client;
}

/** Commits the current unit's transaction on `db` (the outbox, after appending the events); a no-op without one. */
export async function commitUnit(db: Transactional): Promise<void> {
	const unit = als.getStore();
	const tx = unit?.txs.get(db);
	if (!unit || !tx) return;
	unit.txs.delete(db);
	const client = await tx.client;
	try {
		await client.query("commit");
		client.release();
	} catch (err) {
		client.release(err as Error);
		throw err;
	}
}

/** Commits every open transaction of the current unit (before a call to another action). */
export async function flushUnit(): Promise<void> {
	const unit = als.getStore();
	if (!unit?.open || !unit.txs.size) return;
	for (const db of [...unit.txs.keys()]) await commitUnit(db as Transactional);
}

/** Whether the current unit holds an open transaction. */
export function hasOpenTransaction(): boolean {
	const unit = als.getStore();
	return !!unit?.open && unit.txs.size > 0;
}
