//! Splits the SDK's wasm in two: the module every visitor loads, and the
//! wall's, which only a visitor who is shown a wall loads (the wall module
//! carries it). The wall's behaviour stays Rust, compiled with the rest; this
//! moves its code out of what every visitor downloads (DESIGN §4: the common
//! path holds detection, session and transport only).
//!
//!     postern-wasm-split --mark IN.wasm MARKED.wasm NAME…
//!     (wasm-opt MARKED.wasm)
//!     postern-wasm-split MARKED.wasm COMMON.wasm WALL.wasm
//!
//! Each NAME picks one function of IN by a part of its name (`::show_wall::`):
//! a root. `--mark` exports the roots, so that the optimizer, run next on the
//! whole module, neither inlines nor drops them while it deletes the paths
//! that end in a trap. The split then gives the wall module the roots and
//! every function only they reach. In the common module each root keeps its
//! place and signature, but its body calls through a slot of the function
//! table that the wall module fills when it is instantiated: the wall module
//! imports the common module's memory, tables, globals and the functions it
//! calls, which the common module exports for it under one- or two-byte names
//! (`0` … `~`, `10` …) from the import module named by the empty string.
//! Calling a root before the wall module is instantiated traps, so the SDK
//! only calls them once it has the wall module. binaryen's `wasm-split` does
//! the same, but is not in its npm build.

use std::collections::HashSet;

use anyhow::{bail, Context, Result};
use walrus::ir::{dfs_in_order, Value, Visitor};
use walrus::{
    ConstExpr, ElementItems, ElementKind, ExportItem, FunctionBuilder, FunctionId, FunctionKind, GlobalId,
    GlobalKind, ImportKind, ImportedFunction, MemoryId, Module, TableId,
};

/// The import module name of everything the wall module takes from the
/// common one: the empty name, the shortest.
const FROM: &str = "";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Func(FunctionId),
    Table(TableId),
    Global(GlobalId),
    Memory(MemoryId),
}

/// What a function's body refers to, in order.
#[derive(Default)]
struct Refs(Vec<Item>);

impl<'i> Visitor<'i> for Refs {
    fn visit_function_id(&mut self, f: &FunctionId) {
        self.0.push(Item::Func(*f));
    }
    fn visit_table_id(&mut self, t: &TableId) {
        self.0.push(Item::Table(*t));
    }
    fn visit_global_id(&mut self, g: &GlobalId) {
        self.0.push(Item::Global(*g));
    }
    fn visit_memory_id(&mut self, m: &MemoryId) {
        self.0.push(Item::Memory(*m));
    }
}

fn refs(m: &Module, f: FunctionId) -> Vec<Item> {
    let mut r = Refs::default();
    if let FunctionKind::Local(l) = &m.funcs.get(f).kind {
        dfs_in_order(&mut r, l, l.entry_block());
    }
    r.0
}

fn called(items: &[Item]) -> impl Iterator<Item = FunctionId> + '_ {
    items.iter().filter_map(|i| match i {
        Item::Func(f) => Some(*f),
        _ => None,
    })
}

/// The split, computed the same way from each parse of the input (walrus ids
/// are per parse): the order of everything in it follows the input's.
struct Plan {
    roots: Vec<FunctionId>,
    /// The functions the wall module holds, roots included.
    moved: Vec<FunctionId>,
    /// What the wall module imports from the common one, the function table first.
    shared: Vec<Item>,
    table: TableId,
}

/// The prefix of the exports `--mark` gives the roots.
const MARK: &str = "split:";

/// The functions whose names contain `names`, one each, in order.
fn find(m: &Module, names: &[String]) -> Result<Vec<FunctionId>> {
    let mut roots = Vec::new();
    for n in names {
        let found: Vec<FunctionId> =
            m.funcs.iter().filter(|f| f.name.as_deref().is_some_and(|x| x.contains(n.as_str()))).map(|f| f.id()).collect();
        match found[..] {
            [f] if matches!(m.funcs.get(f).kind, FunctionKind::Local(_)) => roots.push(f),
            [] => bail!("no function's name contains {n:?} (is it inlined? mark it #[inline(never)])"),
            _ => bail!("{} functions' names contain {n:?}", found.len()),
        }
    }
    Ok(roots)
}

/// The roots `--mark` exported, in order; their exports are removed.
fn marked(m: &mut Module) -> Result<Vec<FunctionId>> {
    let mut marks: Vec<(usize, walrus::ExportId, FunctionId)> = Vec::new();
    for e in m.exports.iter() {
        if let (Some(n), ExportItem::Function(f)) = (e.name.strip_prefix(MARK), e.item) {
            marks.push((n.parse()?, e.id(), f));
        }
    }
    if marks.is_empty() {
        bail!("no function is marked (run --mark before optimizing)");
    }
    marks.sort_by_key(|m| m.0);
    for (_, e, _) in &marks {
        m.exports.delete(*e);
    }
    Ok(marks.into_iter().map(|m| m.2).collect())
}

fn plan(m: &Module, roots: Vec<FunctionId>) -> Result<Plan> {
    let table = m.tables.main_function_table()?.context("the module has no function table")?;

    // What the common module reaches without entering a root: its exports,
    // table elements and start, and what their code calls.
    let mut common: HashSet<FunctionId> = HashSet::new();
    let mut stack: Vec<FunctionId> = m.exports.iter().filter_map(|e| match e.item {
        ExportItem::Function(f) => Some(f),
        _ => None,
    }).collect();
    for e in m.elements.iter() {
        match &e.items {
            ElementItems::Functions(fs) => stack.extend(fs),
            ElementItems::Expressions(_, es) => {
                for c in es {
                    if let ConstExpr::RefFunc(f) = c {
                        stack.push(*f);
                    }
                }
            }
        }
    }
    stack.extend(m.start);
    while let Some(f) = stack.pop() {
        if common.insert(f) && !roots.contains(&f) {
            stack.extend(called(&refs(m, f)));
        }
    }

    // The roots and what only they reach.
    let mut moved: HashSet<FunctionId> = roots.iter().copied().collect();
    let mut stack = roots.clone();
    while let Some(f) = stack.pop() {
        for g in called(&refs(m, f)) {
            if !common.contains(&g) && matches!(m.funcs.get(g).kind, FunctionKind::Local(_)) && moved.insert(g) {
                stack.push(g);
            }
        }
    }
    let mut moved: Vec<FunctionId> = moved.into_iter().collect();
    moved.sort_by_key(|f| f.index());

    let mut shared = vec![Item::Table(table)];
    for &f in &moved {
        for item in refs(m, f) {
            let inside = matches!(item, Item::Func(g) if moved.contains(&g));
            if !inside && !shared.contains(&item) {
                shared.push(item);
            }
        }
    }
    Ok(Plan { roots, moved, shared, table })
}

/// `0`, `1`, … `~`, `10`…: one byte for the first 36, and left alone by the
/// glue's renaming (`sdk-wasm/tools/short-imports.js` keeps names that do
/// not start with a letter or `_`; wasm-bindgen's all do).
fn name(mut i: usize) -> String {
    const DIGITS: &[u8] = b"0123456789!#%&()*+,-./:;<=>?@[]^{|}~";
    let mut s = Vec::new();
    loop {
        s.push(DIGITS[i % DIGITS.len()]);
        i /= DIGITS.len();
        if i == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).expect("ASCII")
}

/// The first free slot of the function table: the roots' slots start there.
fn base(m: &Module, p: &Plan) -> Result<u32> {
    u32::try_from(m.tables.get(p.table).initial).context("function table too large")
}

/// The common module: the roots' bodies call through the table, and what the
/// wall module uses is exported.
fn common(m: &mut Module, p: &Plan) -> Result<()> {
    let base = base(m, p)?;
    let table = m.tables.get_mut(p.table);
    table.initial += p.roots.len() as u64;
    if let Some(max) = table.maximum.as_mut() {
        *max = (*max).max(table.initial);
    }
    for (slot, &root) in (base..).zip(&p.roots) {
        let ty = m.funcs.get(root).ty();
        let (params, results) = (m.types.params(ty).to_vec(), m.types.results(ty).to_vec());
        let args: Vec<_> = params.iter().map(|t| m.locals.add(*t)).collect();
        let mut b = FunctionBuilder::new(&mut m.types, &params, &results);
        let mut body = b.func_body();
        for &a in &args {
            body.local_get(a);
        }
        body.i32_const(slot as i32).call_indirect(ty, p.table);
        m.funcs.get_mut(root).kind = FunctionKind::Local(b.local_func(args));
    }
    for (i, item) in p.shared.iter().enumerate() {
        let item = match *item {
            Item::Func(f) => ExportItem::Function(f),
            Item::Table(t) => ExportItem::Table(t),
            Item::Global(g) => ExportItem::Global(g),
            Item::Memory(mem) => ExportItem::Memory(mem),
        };
        m.exports.add(&name(i), item);
    }
    walrus::passes::gc::run(m);
    Ok(())
}

/// Makes `import` (if any) the wall module's import of `name`, or adds one.
fn import_as(m: &mut Module, import: Option<walrus::ImportId>, name: &str, kind: ImportKind) -> walrus::ImportId {
    match import {
        Some(id) => {
            let i = m.imports.get_mut(id);
            i.module = FROM.to_string();
            i.name = name.to_string();
            id
        }
        None => m.imports.add(FROM, name, kind),
    }
}

/// The wall module: the moved functions, everything else imported, and one
/// table segment that puts the roots in their slots.
fn wall(m: &mut Module, p: &Plan) -> Result<()> {
    let base = base(m, p)?;
    for e in m.exports.iter().map(|e| e.id()).collect::<Vec<_>>() {
        m.exports.delete(e);
    }
    m.start = None;
    for e in m.elements.iter().map(|e| e.id()).collect::<Vec<_>>() {
        m.elements.delete(e);
    }
    for d in m.data.iter().map(|d| d.id()).collect::<Vec<_>>() {
        m.data.delete(d);
    }
    for (i, item) in p.shared.iter().enumerate() {
        let n = name(i);
        match *item {
            Item::Func(f) => {
                let ty = m.funcs.get(f).ty();
                let existing = match &m.funcs.get(f).kind {
                    FunctionKind::Import(imp) => Some(imp.import),
                    _ => None,
                };
                let import = import_as(m, existing, &n, ImportKind::Function(f));
                m.funcs.get_mut(f).kind = FunctionKind::Import(ImportedFunction { import, ty });
            }
            Item::Table(t) => {
                let existing = m.tables.get(t).import;
                let import = import_as(m, existing, &n, ImportKind::Table(t));
                let table = m.tables.get_mut(t);
                table.import = Some(import);
                table.elem_segments.clear();
            }
            Item::Global(g) => {
                let existing = match m.globals.get(g).kind {
                    GlobalKind::Import(id) => Some(id),
                    GlobalKind::Local(_) => None,
                };
                let import = import_as(m, existing, &n, ImportKind::Global(g));
                m.globals.get_mut(g).kind = GlobalKind::Import(import);
            }
            Item::Memory(mem) => {
                let existing = m.memories.get(mem).import;
                let import = import_as(m, existing, &n, ImportKind::Memory(mem));
                let memory = m.memories.get_mut(mem);
                memory.import = Some(import);
                memory.data_segments.clear();
            }
        }
    }
    // The common module's table has grown by the roots' slots; an import
    // without a maximum accepts it whatever its own maximum.
    let table = m.tables.get_mut(p.table);
    table.initial += p.roots.len() as u64;
    table.maximum = None;
    let offset = ConstExpr::Value(Value::I32(base as i32));
    let segment = m.elements.add(ElementKind::Active { table: p.table, offset }, ElementItems::Functions(p.roots.clone()));
    m.tables.get_mut(p.table).elem_segments.insert(segment);
    walrus::passes::gc::run(m);
    let left = m.funcs.iter().filter(|f| matches!(f.kind, FunctionKind::Local(_))).count();
    if left != p.moved.len() {
        bail!("the wall module holds {left} functions, {} were moved", p.moved.len());
    }
    Ok(())
}

/// Exports the roots, so that the optimizer neither inlines them into
/// their callers nor drops them, and `split` finds them without names.
fn mark(bytes: &[u8], names: &[String]) -> Result<Vec<u8>> {
    let mut m = walrus::ModuleConfig::new().parse(bytes)?;
    for (i, f) in find(&m, names)?.into_iter().enumerate() {
        m.exports.add(&format!("{MARK}{i}"), f);
    }
    Ok(m.emit_wasm())
}

/// The common module and the wall module, from a module `mark` marked.
fn split(bytes: &[u8]) -> Result<(Vec<u8>, Vec<u8>, Plan)> {
    let parse = || walrus::ModuleConfig::new().parse(bytes);
    let mut c = parse()?;
    let roots = marked(&mut c)?;
    let p = plan(&c, roots)?;
    common(&mut c, &p)?;

    // Planned again on a parse of its own: the same plan, in that parse's ids.
    let mut w = parse()?;
    let roots = marked(&mut w)?;
    let pw = plan(&w, roots)?;
    wall(&mut w, &pw)?;
    Ok((c.emit_wasm(), w.emit_wasm(), p))
}

const USAGE: &str = "usage: postern-wasm-split --mark IN.wasm OUT.wasm NAME…
       postern-wasm-split IN.wasm COMMON.wasm WALL.wasm";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let read = |p: &str| std::fs::read(p).with_context(|| format!("reading {p}"));
    match &args[..] {
        [mode, input, output, names @ ..] if mode == "--mark" && !names.is_empty() => {
            std::fs::write(output, mark(&read(input)?, names)?)?;
        }
        [input, common_out, wall_out] => {
            let (common, wall, p) = split(&read(input)?)?;
            std::fs::write(common_out, common)?;
            std::fs::write(wall_out, wall)?;
            eprintln!("postern-wasm-split: {} functions moved to {wall_out}, {} items shared", p.moved.len(), p.shared.len());
        }
        _ => bail!(USAGE),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use walrus::ir::BinaryOp;
    use walrus::{FunctionBuilder, FunctionKind, Module, ValType};

    use super::*;

    #[test]
    fn names_are_short_and_distinct() {
        assert_eq!(name(0), "0");
        assert_eq!(name(35), "~");
        assert_eq!(name(36), "10");
        assert!((0..5000).map(name).all(|n| !n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')));
        let all: HashSet<String> = (0..5000).map(name).collect();
        assert_eq!(all.len(), 5000);
    }

    /// `(i32) -> i32` named `name`: `x + k`, through `calls` (each applied in turn).
    fn func(m: &mut Module, name: &str, k: i32, calls: &[FunctionId]) -> FunctionId {
        let x = m.locals.add(ValType::I32);
        let mut b = FunctionBuilder::new(&mut m.types, &[ValType::I32], &[ValType::I32]);
        b.name(name.to_string());
        let mut body = b.func_body();
        body.local_get(x).i32_const(k).binop(BinaryOp::I32Add);
        for &c in calls {
            body.call(c);
        }
        b.finish(vec![x], &mut m.funcs)
    }

    /// A module like the SDK's: `main` (exported) calls `shared` and the root
    /// `show`, which calls `shared`, `only` (nothing else calls it) and a JS import.
    fn sample() -> Vec<u8> {
        let mut m = Module::default();
        let ty = m.types.add(&[ValType::I32], &[ValType::I32]);
        let (js, _) = m.add_import_func("env", "js", ty);
        let table = m.tables.add_local(false, 1, None, walrus::RefType::FUNCREF);
        m.exports.add("table", table);
        let shared = func(&mut m, "shared", 1, &[]);
        let only = func(&mut m, "only", 2, &[js]);
        let show = func(&mut m, "crate::show::h1", 3, &[only, shared]);
        let main = func(&mut m, "main", 4, &[shared, show]);
        m.exports.add("main", main);
        m.emit_wasm()
    }

    fn names(m: &Module) -> Vec<(String, bool)> {
        let mut v: Vec<_> =
            m.funcs.iter().map(|f| (f.name.clone().unwrap_or_default(), matches!(f.kind, FunctionKind::Local(_)))).collect();
        v.sort();
        v
    }

    #[test]
    fn the_root_and_what_only_it_calls_move_and_the_rest_is_imported() {
        let marked = mark(&sample(), &["::show::".to_string()]).unwrap();
        let (common, wall, plan) = split(&marked).unwrap();
        let config = walrus::ModuleConfig::new();
        let (c, w) = (config.parse(&common).unwrap(), config.parse(&wall).unwrap());
        assert_eq!((plan.roots.len(), plan.moved.len()), (1, 2));

        // The common module keeps `show` (its body now a call through the
        // table) but not `only`; it exports what the wall uses, and no mark.
        let locals = |m: &Module| names(m).into_iter().filter(|n| n.1).map(|n| n.0).collect::<Vec<_>>();
        assert_eq!(locals(&c), ["crate::show::h1", "main", "shared"]);
        assert_eq!(c.imports.iter().map(|i| (i.module.as_str(), i.name.as_str())).collect::<Vec<_>>(), [("env", "js")]);
        let show = c.funcs.iter().find(|f| f.name.as_deref() == Some("crate::show::h1")).unwrap();
        let FunctionKind::Local(body) = &show.kind else { panic!("show is local") };
        assert_eq!(body.size(), 3, "local.get, i32.const slot, call_indirect");
        assert_eq!(c.tables.iter().next().unwrap().initial, 2, "one slot more for the root");
        let mut exports: Vec<_> = c.exports.iter().map(|e| e.name.clone()).collect();
        exports.sort();
        assert_eq!(exports, ["0", "1", "2", "main", "table"], "the table, `shared` and the import `js`");

        // The wall module holds `show` and `only`, imports the rest from ``
        // under the names the common module exports them by, and puts `show`
        // in the new slot.
        assert_eq!(locals(&w), ["crate::show::h1", "only"]);
        let imports: HashSet<(String, String)> = w.imports.iter().map(|i| (i.module.clone(), i.name.clone())).collect();
        let exported: HashSet<(String, String)> =
            c.exports.iter().filter(|e| e.name.len() == 1 && e.name != "a").map(|e| (String::new(), e.name.clone())).collect();
        assert_eq!(imports, exported);
        assert_eq!(w.exports.iter().count(), 0);
        let segments: Vec<_> = w.elements.iter().collect();
        assert_eq!(segments.len(), 1);
        let ElementKind::Active { offset: ConstExpr::Value(Value::I32(1)), .. } = segments[0].kind else {
            panic!("the root goes to slot 1: {:?}", segments[0].kind)
        };
        assert!(matches!(&segments[0].items, ElementItems::Functions(f) if f.len() == 1));
    }

    #[test]
    fn a_name_that_matches_no_function_or_several_is_refused() {
        assert!(mark(&sample(), &["::nothing::".to_string()]).unwrap_err().to_string().contains("no function"));
        assert!(mark(&sample(), &["s".to_string()]).unwrap_err().to_string().contains("functions' names contain"));
        assert!(split(&sample()).err().expect("an unmarked module is refused").to_string().contains("no function is marked"));
    }
}
