-- AlterTable
ALTER TABLE "Instance" ADD COLUMN     "fromSnapshotId" TEXT,
ADD COLUMN     "startedFrom" TEXT;

-- CreateTable
CREATE TABLE "Snapshot" (
    "id" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "instanceId" TEXT,
    "instanceName" TEXT NOT NULL,
    "image" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "memory" BOOLEAN NOT NULL,
    "vcpu" INTEGER NOT NULL,
    "memoryMib" INTEGER NOT NULL,
    "diskMib" INTEGER NOT NULL,
    "imageProfile" TEXT NOT NULL,
    "imageVersion" TEXT,
    "artifactKey" TEXT NOT NULL,
    "sizeBytes" BIGINT,
    "progress" DOUBLE PRECISION,
    "error" TEXT,
    "workerId" TEXT,
    "takenBy" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "readyAt" TIMESTAMP(3),

    CONSTRAINT "Snapshot_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "Snapshot_accountId_createdAt_idx" ON "Snapshot"("accountId", "createdAt");

-- CreateIndex
CREATE INDEX "Snapshot_instanceId_idx" ON "Snapshot"("instanceId");

-- CreateIndex
CREATE UNIQUE INDEX "Snapshot_accountId_name_key" ON "Snapshot"("accountId", "name");

-- AddForeignKey
ALTER TABLE "Snapshot" ADD CONSTRAINT "Snapshot_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Snapshot" ADD CONSTRAINT "Snapshot_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance"("id") ON DELETE SET NULL ON UPDATE CASCADE;
