// The QEMU driver: one QEMU process per machine, controlled over QMP. See each module's header.
export * from './accelerator-probe';
export * from './command-line';
export * from './disks';
export * from './machine-files';
export * from './memory-session';
export * from './qemu-process';
export * from './qmp-client';
export * from './ram-file';
