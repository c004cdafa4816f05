/**
 * One document (GET /<service>/<collection>/<id>) with its ETag: edit (PATCH with `If-Match`), soft delete, restore,
 * destroy, and its special actions. A save refused with 412 (the document changed since it was read) writes
 * nothing: the page shows the edit and the current version side by side, and the user chooses.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import { api, HttpError } from "../api";
import type { CollectionInfo } from "../catalog";
import { DocumentSpecials } from "./specials";
import { cellText, ErrorBox, Field, Json, Link, Notice, Page, parseJson, useAction } from "../ui";

type Doc = Record<string, unknown>;

/** Fields the platform sets (read-only in the OpenAPI document, refused in a body): not in the edit form. */
const platformSet = (col: CollectionInfo) => new Set(["id", ...col.fields.filter((f) => f.readOnly).map((f) => f.name)]);

const editable = (doc: Doc, fixed: Set<string>) => JSON.stringify(Object.fromEntries(Object.entries(doc).filter(([k]) => !fixed.has(k))), null, 2);

export function DocumentView({ col, id }: { col: CollectionInfo; id: string }) {
	const path = `/${col.service}/${col.name}/${id}`;
	const fixed = platformSet(col);
	const [doc, setDoc] = useState<Doc | undefined>(undefined);
	const [etag, setEtag] = useState<string | null>(null);
	const [text, setText] = useState("");
	const [editing, setEditing] = useState(false);
	const [conflict, setConflict] = useState<Doc | undefined>(undefined);
	const [deleted, setDeleted] = useState(false);
	const [confirmDestroy, setConfirmDestroy] = useState(false);
	const [done, setDone] = useState("");
	const [busy, error, run] = useAction();
	const conflictTitle = useRef<HTMLHeadingElement>(null);
	// A conflict takes the focus (and the screen): it is what the user must decide on now.
	useEffect(() => conflictTitle.current?.focus(), [conflict]);

	const load = () =>
		run(async () => {
			const r = await api<{ data: Doc }>("GET", path);
			setDoc(r.data.data);
			setEtag(r.etag);
			setText(editable(r.data.data, fixed));
			setDeleted(false);
		});
	useEffect(() => {
		setEditing(false);
		setConflict(undefined);
		setDone("");
		void load();
	}, [path]);

	const save = () =>
		run(async () => {
			const body = parseJson(text, "the document") as Doc;
			// A field removed from the text is cleared (`null`), as PATCH clears one.
			for (const k of Object.keys(doc ?? {})) if (!fixed.has(k) && !(k in body)) body[k] = null;
			try {
				const r = await api<{ data: Doc }>("PATCH", path, { body, headers: etag ? { "if-match": etag } : {} });
				setDoc(r.data.data);
				setEtag(r.etag);
				setText(editable(r.data.data, fixed));
				setEditing(false);
				setDone("Saved.");
			} catch (e) {
				if (!(e instanceof HttpError) || e.status !== 412) throw e;
				// Nothing was written: show what the document is now next to the edit.
				setConflict((await api<{ data: Doc }>("GET", path)).data.data);
				throw e;
			}
		});

	const remove = () =>
		run(async () => {
			const r = await api("DELETE", path, { headers: etag ? { "if-match": etag } : {} });
			setEtag(r.etag);
			setDeleted(true);
			setDone("Deleted (soft): it is hidden from reads until restored.");
		});
	const restore = () =>
		run(async () => {
			const r = await api<{ data: Doc }>("PUT", `${path}/restore`, { headers: etag ? { "if-match": etag } : {} });
			setDoc(r.data.data ?? doc);
			setEtag(r.etag);
			setDeleted(false);
			setDone("Restored.");
		});
	const destroy = () =>
		run(async () => {
			await api("DELETE", `${path}/destroy`, { headers: etag ? { "if-match": etag } : {} });
			setDoc(undefined);
			setDone("Destroyed: the document is gone for good.");
		});

	return (
		<Page title={`${col.service} / ${col.name} / ${id}`} actions={<Link to={`/${col.service}/${col.name}`}>Back to {col.name}</Link>}>
			{done && <Notice>{done}</Notice>}
			<ErrorBox error={error} />
			{conflict && (
				<section class="conflict panel" aria-labelledby="conflict-title">
					<h2 id="conflict-title" tabIndex={-1} ref={conflictTitle}>
						Conflict: the document changed since you opened it
					</h2>
					<p>Nothing was saved. Compare, then keep editing on top of the current version or discard your edit.</p>
					<div class="columns">
						<div>
							<h3>Your version</h3>
							<Json value={parseSafe(text)} />
						</div>
						<div>
							<h3>Current version</h3>
							<Json value={conflict} />
						</div>
					</div>
					<div class="row">
						<button type="button" onClick={() => (setConflict(undefined), void load().then(() => setEditing(true)))}>
							Load the current version
						</button>
						<button type="button" class="secondary" onClick={() => setConflict(undefined)}>
							Close
						</button>
					</div>
				</section>
			)}
			{doc && (
				<>
					{deleted && <p class="badge">soft-deleted</p>}
					<dl class="doc" aria-label="Fields">
						{Object.entries(doc).map(([k, v]) => (
							<div key={k} data-field={k}>
								<dt>{k}</dt>
								<dd>{cellText(v)}</dd>
							</div>
						))}
					</dl>
					<p class="muted">ETag {etag ?? "(none)"}</p>
					{editing ? (
						<form
							aria-label="Edit"
							onSubmit={(e) => {
								e.preventDefault();
								void save();
							}}
						>
							<Field label="Fields (JSON)" value={text} onInput={setText} multiline={14} hint="Saved with If-Match: a change made meanwhile by someone else is not overwritten." />
							<div class="row">
								<button type="submit" disabled={busy}>
									Save
								</button>
								<button type="button" class="secondary" onClick={() => (setEditing(false), setText(editable(doc, fixed)))}>
									Cancel
								</button>
							</div>
						</form>
					) : (
						<div class="row wrap">
							{!deleted && (
								<button type="button" onClick={() => setEditing(true)}>
									Edit
								</button>
							)}
							{!deleted ? (
								<button type="button" class="secondary" disabled={busy} onClick={() => void remove()}>
									Delete
								</button>
							) : (
								<button type="button" disabled={busy} onClick={() => void restore()}>
									Restore
								</button>
							)}
							{confirmDestroy ? (
								<>
									<button type="button" class="danger" disabled={busy} onClick={() => void destroy()}>
										Confirm: destroy for good
									</button>
									<button type="button" class="secondary" onClick={() => setConfirmDestroy(false)}>
										Keep it
									</button>
								</>
							) : (
								<button type="button" class="danger" onClick={() => setConfirmDestroy(true)}>
									Destroy
								</button>
							)}
						</div>
					)}
					<DocumentSpecials col={col} id={id} etag={etag} doc={doc} onDone={() => void load()} />
				</>
			)}
		</Page>
	);
}

function parseSafe(text: string): unknown {
	try {
		return JSON.parse(text);
	} catch {
		return text;
	}
}
