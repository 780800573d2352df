/**
 * Where the training worker keeps its kernel choices between visits (kernels/tuning/choice.ts
 * `TuningStore`): IndexedDB, which a dedicated worker can use (localStorage it cannot). One object store
 * of choices by key (adapter and shapes). Where IndexedDB is missing or refuses (a private window, a
 * blocked origin), the choices last for this worker's life only: a tab then tunes at every visit,
 * which costs time, never correctness. What is read back is checked by `chooseVariants` like any input.
 */
import { memoryTuningStore, type TuningStore } from '../../kernels/tuning/choice';

const DB_NAME = 'tabswarm-kernels';
const STORE = 'choices';

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error ?? new Error('IndexedDB request failed'));
  });
}

function openDatabase(): Promise<IDBDatabase> {
  const open = indexedDB.open(DB_NAME, 1);
  open.onupgradeneeded = () => open.result.createObjectStore(STORE);
  return request(open);
}

/** IndexedDB when it opens, else memory (see the file comment). */
export async function browserTuningStore(): Promise<TuningStore> {
  let db: IDBDatabase;
  try {
    if (typeof indexedDB === 'undefined') return memoryTuningStore();
    db = await openDatabase();
  } catch {
    return memoryTuningStore();
  }
  const store = (mode: IDBTransactionMode) => db.transaction(STORE, mode).objectStore(STORE);
  return {
    get: (key) => request(store('readonly').get(key)),
    set: async (key, value) => void (await request(store('readwrite').put(value, key))),
  };
}
