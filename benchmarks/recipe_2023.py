"""The original recipe, as it was written: Hugging Face's "Fine-tune BERT for text classification on AWS Trainium" (2023).

A transcription of the tutorial's data cell (notebook) and of its `scripts/train.py` (huggingface/optimum-neuron,
`notebooks/text-classification`), kept line for line where the stack allows. What had to change, and nothing else:

- data: `load_dataset("philschmid/emotion")` needs the Hub; `load_emotion` reads the same files (the emotion `.txt`
  files that dataset was built from) into the same `DatasetDict`: `text`, a `ClassLabel` `label` in the Hub's order;
- `Trainer`/`TrainingArguments` from transformers instead of optimum-neuron's `TrainiumTrainer` (the tutorial calls it
  a one-to-one replacement; it is Neuron-only, and this runs on a CPU);
- `TrainingArguments`: `evaluation_strategy` is now `eval_strategy`; `overwrite_output_dir` and `logging_dir` no longer
  exist in transformers 5; `report_to="none"` (tensorboard is not installed); the Hub upload arguments are dropped;
- the metric: scikit-learn's weighted `f1_score`, which `evaluate.load("f1")` wraps (`evaluate` is not installed);
- for the benchmark only: `--max_steps N` trains N optimizer steps with no evaluation and no checkpoint (the
  recipe evaluates and saves at each epoch's end) and prints the Trainer's train metrics as one JSON line;
- `--bf16 True` on a machine without a GPU adds `use_cpu=True` (transformers 5 refuses bf16 there otherwise).

    python recipe_2023.py --prepare --data ../shared/data/emotion --model_id M --dataset_path lm_dataset
    python recipe_2023.py --model_id M --dataset_path lm_dataset --lr 5e-5 --per_device_train_batch_size 16 --epochs 3

The tutorial ran the second command under `torchrun --nproc_per_node=2` on two NeuronCores, with `--bf16 True`.
"""
import argparse
import json
import logging
import os
import resource

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, load_from_disk
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    set_seed,
)

from transformers import Trainer, TrainingArguments
from transformers.utils import is_torch_cuda_available

logger = logging.getLogger(__name__)

EMOTION_LABELS = ['sadness', 'joy', 'love', 'anger', 'fear', 'surprise']  # philschmid/emotion's label order


def load_emotion(data_dir):
    "The emotion `.txt` files (`text;label` lines) as `load_dataset('philschmid/emotion')` returns them."
    splits = {}
    for split in ('train', 'validation', 'test'):
        rows = [line.rstrip('\n').rsplit(';', 1) for line in open(os.path.join(data_dir, f'{split}.txt'), encoding='utf-8') if line.strip()]
        splits[split] = Dataset.from_dict({'text': [t for t, _ in rows], 'label': [EMOTION_LABELS.index(l) for _, l in rows]})
        splits[split] = splits[split].cast_column('label', ClassLabel(names=EMOTION_LABELS))
    return DatasetDict(splits)


def prepare(data_dir, model_id, save_dataset_path, max_length=None):
    "The tutorial's notebook cell '2. Load and process the dataset'."
    raw_dataset = load_emotion(data_dir)

    # Load Tokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_id)

    # Tokenize helper function
    def tokenize(batch):
        return tokenizer(batch['text'], padding='max_length', truncation=True, return_tensors="pt",
                         **({'max_length': max_length} if max_length else {}))   # benchmark: --max_length 128; the notebook: the model's 512

    # Tokenize dataset
    raw_dataset = raw_dataset.rename_column("label", "labels")  # to match Trainer
    tokenized_dataset = raw_dataset.map(tokenize, batched=True, remove_columns=["text"])
    tokenized_dataset = tokenized_dataset.with_format("torch")

    # save dataset to disk
    tokenized_dataset["train"].save_to_disk(os.path.join(save_dataset_path, "train"))
    tokenized_dataset["test"].save_to_disk(os.path.join(save_dataset_path, "eval"))


def parse_args():
    """Parse the arguments."""
    parser = argparse.ArgumentParser()
    # add model id and dataset path argument
    parser.add_argument("--model_id", type=str, default="bert-large-uncased", help="Model id to use for training.")
    parser.add_argument("--dataset_path", type=str, default="dataset", help="Path to the already processed dataset.")
    # add training hyperparameters for epochs, batch size, learning rate, and seed
    parser.add_argument("--epochs", type=int, default=3, help="Number of epochs to train for.")
    parser.add_argument("--per_device_train_batch_size", type=int, default=8, help="Batch size to use for training.")
    parser.add_argument("--per_device_eval_batch_size", type=int, default=8, help="Batch size to use for testing.")
    parser.add_argument("--lr", type=float, default=5e-5, help="Learning rate to use for training.")
    parser.add_argument("--seed", type=int, default=42, help="Seed to use for training.")
    parser.add_argument(
        "--bf16",
        type=bool,  # as written: `--bf16 False` parses as True; leave the option out for fp32
        default=False,
        help="Whether to use bf16.",
    )
    # added for the benchmark
    parser.add_argument("--prepare", action="store_true", help="run the notebook's data cell instead of training")
    parser.add_argument("--data", type=str, default=None, help="folder of the emotion .txt files (with --prepare)")
    parser.add_argument("--max_steps", type=int, default=-1, help="benchmark: train this many steps, no evaluation or checkpoint")
    parser.add_argument("--max_length", type=int, default=None, help="benchmark (with --prepare): pad to this instead of the model's 512")
    args = parser.parse_known_args()
    return args


# Metric helper method
def compute_metrics(eval_pred):
    from sklearn.metrics import f1_score
    predictions, labels = eval_pred
    predictions = np.argmax(predictions, axis=1)
    return {"f1": f1_score(labels, predictions, average="weighted")}


def training_function(args):
    # set seed
    set_seed(args.seed)

    # load dataset from disk and tokenizer
    train_dataset = load_from_disk(os.path.join(args.dataset_path, "train"))
    eval_dataset = load_from_disk(os.path.join(args.dataset_path, "eval"))
    tokenizer = AutoTokenizer.from_pretrained(args.model_id)

    # Prepare model labels - useful for inference
    labels = train_dataset.features["labels"].names
    num_labels = len(labels)
    label2id, id2label = {}, {}
    for i, label in enumerate(labels):
        label2id[label] = str(i)
        id2label[str(i)] = label

    # Download the model from huggingface.co/models
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_id, num_labels=num_labels, label2id=label2id, id2label=id2label
    )

    # Define training args
    output_dir = args.model_id.split("/")[-1] if "/" in args.model_id else args.model_id
    output_dir = f"{output_dir}-finetuned"
    training_args = dict(
        output_dir=output_dir,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        bf16=args.bf16,  # Use BF16 if available
        learning_rate=args.lr,
        num_train_epochs=args.epochs,
        # logging & evaluation strategies
        logging_strategy="steps",
        logging_steps=500,
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=2,
        report_to="none",
    )
    if args.bf16 and not is_torch_cuda_available():   # benchmark on a CPU: transformers 5 takes bf16 there only with use_cpu
        training_args |= dict(use_cpu=True)
    measure = args.max_steps > 0
    if measure: training_args |= dict(max_steps=args.max_steps, eval_strategy="no", save_strategy="no")
    training_args = TrainingArguments(**training_args)

    # Create Trainer instance
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        compute_metrics=compute_metrics,
    )

    # Start training
    result = trainer.train()
    if measure:
        print('RECIPE_METRICS ' + json.dumps(result.metrics | {'global_step': result.global_step,
              'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
        return

    eval_res = trainer.evaluate(eval_dataset=eval_dataset)

    print(eval_res)

    # Save our tokenizer and create model card
    tokenizer.save_pretrained(output_dir)
    trainer.create_model_card()


def main():
    args, _ = parse_args()
    if args.prepare: return prepare(args.data, args.model_id, args.dataset_path, args.max_length)
    training_function(args)


if __name__ == "__main__":
    main()
