/**
 * A unit of work: the statements of one write action and its change events commit in one PostgreSQL transaction.
 *
 * The collection engine runs each action inside `unitOfWork` (stores/unit.middleware.ts, a middleware around every collection action). The document
 * store's writes in that scope open a transaction lazily, on one pooled connection per database; reads in the scope
 * see those writes. The outbox's append (events/outbox.ts) inserts the events on the same connection and commits
 * (`commitUnit`): the documents and their events are durable together or not at all. Whatever the action writes
 * afterwards (hooks) opens a new transaction, committed when the action returns; an action that throws rolls back
 * what is not committed yet.
 *
 * A write can be held back instead (`holdWrite`, a create's document insert): no transaction is begun for it, and the
 * outbox's append takes it (`takeHeld`) into the statement that appends the events, which then is the transaction,
 * one round trip instead of four (begin, insert, append, commit). Anything else on that database in the unit (a read
 * that must see the write, another write, a call to another action) begins the transaction with the held write
 * first; a unit that ends without an append runs it alone (commit) or drops it (rollback).
 *
 * Scopes do not nest: an action called from inside another one (a local `ctx.call`) gets a unit of its own.
 */
import { AsyncLocalStorage } from "async_hooks";
import type { PoolClient, QueryConfig } from "pg";

interface Tx {
	client: Promise<PoolClient>;
}

/**
 * A statement held back by the unit (text, values, and its name when it is a named statement). `rows`: when the
 * statement is an insert of whole documents into one table (a create), their JSON texts, so that the outbox can write
 * the inserts of several concurrent units in one statement (group commit, stores/pg.outbox.ts).
 */
export type Held = QueryConfig & { rows?: { table: string; docs: string[] } };

export interface Unit {
	open: boolean;
	txs: Map<object, Tx>;
	held: Map<object, Held>;
	/** The deadline of each of its statements, when the unit's action serves a client's request (runtime/relational.ts). */
	deadlineMs?: number;
}

const als = new AsyncLocalStorage<Unit>();

/** A database a unit can hold a transaction on: the key of its connection in the unit. */
export interface Transactional {
	client(deadlineMs?: number): Promise<PoolClient>;
}

/**
 * Units running now. The scope's storage is switched off whenever none runs: while it is on, Node (20; before
 * AsyncContextFrame) runs its promise hooks for every promise of the process, units or not, so a node that serves
 * reads only (which need no unit: unit.middleware.ts) pays nothing for them. Units that ended are closed (`open`
 * false): a continuation of one that still finds it after the storage is back on treats it as no unit.
 */
let running = 0;

/** `deadlineMs`: the deadline of every statement of the unit (an action serving a client's request). */
export async function unitOfWork<T>(fn: () => Promise<T>, deadlineMs?: number): Promise<T> {
	const unit: Unit = { open: true, txs: new Map(), held: new Map(), deadlineMs };
	running++;
	try {
		return await als.run(unit, async () => {
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
	} finally {
		if (--running === 0) als.disable();
	}
}

async function finish(unit: Unit, commit: boolean): Promise<void> {
	unit.open = false;
	const txs = [...unit.txs.values()];
	unit.txs.clear();
	const held = [...unit.held];
	unit.held.clear();
	let failure: unknown;
	// A held write nothing took: alone, its own transaction (never begun on a rollback: nothing to undo).
	if (commit)
		for (const [db, h] of held)
			try {
				await runAlone(db as Transactional, h, unit.deadlineMs);
			} catch (err) {
				failure ??= err;
			}
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

async function runAlone(db: Transactional, h: Held, deadlineMs: number | undefined): Promise<void> {
	const c = await db.client(deadlineMs);
	try {
		await c.query(h);
	} finally {
		c.release();
	}
}

/**
 * The current unit's open transaction on `db`, if a write in this scope began one (or held one back: the transaction
 * begins now with it, so that what follows sees it).
 */
export function openTransaction(db: Transactional): Promise<PoolClient> | undefined {
	const unit = als.getStore();
	if (!unit?.open) return undefined;
	return unit.held.has(db) ? unitTransaction(db) : unit.txs.get(db)?.client;
}

/**
 * Holds `statement` back in the current unit (see above) when the unit has nothing on `db` yet; false (the caller
 * runs it as usual) outside a unit or once the unit holds a transaction or another write there.
 */
export function holdWrite(db: Transactional, statement: Held): boolean {
	const unit = als.getStore();
	if (!unit?.open || unit.txs.has(db) || unit.held.has(db)) return false;
	unit.held.set(db, statement);
	return true;
}

/** The write the current unit holds back on `db`, now the caller's to run (no transaction is open there then). */
export function takeHeld(db: Transactional): Held | undefined {
	const unit = als.getStore();
	const h = unit?.open ? unit.held.get(db) : undefined;
	if (h) unit!.held.delete(db);
	return h;
}

/** The deadline of the current unit's statements (undefined outside a unit, or in one that serves no request). */
export function unitDeadline(): number | undefined {
	const unit = als.getStore();
	return unit?.open ? unit.deadlineMs : undefined;
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
		const held = unit.held.get(db);
		unit.held.delete(db);
		tx = {
			client: (async () => {
				const c = await db.client(unit.deadlineMs);
				try {
					await c.query("begin");
				} catch (err) {
					c.release(err as Error);
					throw err;
				}
				if (held)
					try {
						await c.query(held);
					} catch (err) {
						await c.query("rollback").then(
							() => c.release(),
							(e) => c.release(e as Error),
						);
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

/**
 * Commits the current unit's transaction on `db` (the outbox, after appending the events), or runs the write it holds
 * back there; a no-op without either.
 */
export async function commitUnit(db: Transactional): Promise<void> {
	const unit = als.getStore();
	const held = takeHeld(db);
	if (held) return runAlone(db, held, unit?.deadlineMs);
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
	if (!unit?.open || !(unit.txs.size + unit.held.size)) return;
	for (const db of new Set([...unit.held.keys(), ...unit.txs.keys()])) await commitUnit(db as Transactional);
}

/** Whether the current unit holds an open transaction (or a write held back). */
export function hasOpenTransaction(): boolean {
	const unit = als.getStore();
	return !!unit?.open && unit.txs.size + unit.held.size > 0;
}
