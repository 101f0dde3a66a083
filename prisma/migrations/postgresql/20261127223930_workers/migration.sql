-- AlterTable
ALTER TABLE "Instance" ADD COLUMN     "workerId" TEXT;

-- CreateTable
CREATE TABLE "Worker" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "address" TEXT NOT NULL,
    "sealedSecret" TEXT NOT NULL,
    "certificatePem" TEXT,
    "state" TEXT NOT NULL DEFAULT 'active',
    "epoch" INTEGER NOT NULL DEFAULT 1,
    "vcpu" INTEGER NOT NULL DEFAULT 0,
    "memoryMib" INTEGER NOT NULL DEFAULT 0,
    "diskMib" INTEGER NOT NULL DEFAULT 0,
    "leaseUntil" TIMESTAMP(3),
    "protocolVersion" INTEGER,
    "lastError" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Worker_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "Worker_name_key" ON "Worker"("name");

-- CreateIndex
CREATE INDEX "Instance_workerId_idx" ON "Instance"("workerId");

-- AddForeignKey
ALTER TABLE "Instance" ADD CONSTRAINT "Instance_workerId_fkey" FOREIGN KEY ("workerId") REFERENCES "Worker"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
